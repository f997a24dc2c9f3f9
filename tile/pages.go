package tile

// Paged K/V (Problem.PageKeys): a serving cache keeps its keys in blocks
// of a pool, each sequence a table of blocks, so that sequences grow,
// fork and share prefixes without copying rows. Every reader of K and V
// takes its rows from kvRows, which on paged K/V are contiguous only to
// the end of a block; the readers cut their runs there (pageRun): the
// fused decode kernel is called once per block's run, a flash block that
// crosses a block boundary is gathered into the workspace (the same rows,
// so the same bits as unpaged K/V), and a Regroup copies block by block.

// pagedRow is kvRow on paged K/V: the offset of key j of KV head g of
// batch b in rows of dim elements. A key past the table or in a released
// block reads block 0 (its rows are never used: no row sees such keys).
func (p *Problem) pagedRow(b, j, g, dim int) int {
	blk, n := int32(0), j/p.PageKeys
	if pages := p.Pages[b]; n < len(pages) && pages[n] >= 0 {
		blk = pages[n]
	}
	return ((int(blk)*p.KVHeads+g)*p.PageKeys + j%p.PageKeys) * dim
}

// pageRun returns how many of the n keys from j on lie contiguously in
// j's block: n on K/V that is not paged.
func (p *Problem) pageRun(j, n int) int {
	if p.PageKeys == 0 {
		return n
	}
	return min(n, p.PageKeys-j%p.PageKeys)
}

// pagedBlock returns the flash loop's KV block length on pages of page
// keys: the longest multiple of 16 up to bc that divides page (page is a
// multiple of 16), so that blocks aligned to multiples of it never cross
// a page (a block's rows must be contiguous: one page). Measured on Zen 4
// (one thread, a cascade of 128 query rows per KV head over 4,096 keys in
// pages of 64, D 128): blocks of the unpaged 352 keys, gathered across
// pages, spent 19% of the step copying rows.
func pagedBlock(bc, page int) int {
	for k := min(bc, page) / 16 * 16; k > 16; k -= 16 {
		if page%k == 0 {
			return k
		}
	}
	return 16
}
