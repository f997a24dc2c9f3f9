package tile

import "github.com/fastattn/fastattn/fallback"

// Problem is one attention call, validated and with every default resolved
// by the mha package. Tensors are flat row-major float32: BSHD
// ([batch][seq][head][dim]) or, with HeadsMajor (Q and Out) and
// KVHeadsMajor (K and V), BHSD.
type Problem struct {
	Q, K, V, Out []float32
	LSE          []float32 // [B][H][Lq], or nil

	// KVType is the storage of K and V: float32 in K and V, a 16-bit type
	// in K16 and V16, or int8 in K8 and V8 with their scales KS and VS
	// (fallback.Int8Blocks(dim) per row, laid out as the rows are). Int4
	// (ggml's q4_0 blocks, fallback/int4kv.go) is carried as int8 is: K8
	// and V8 hold its bytes, rows of fallback.Int4RowBytes(dim).
	KVType   fallback.KVType
	K16, V16 []uint16
	K8, V8   []int8
	KS, VS   []float32

	Batch, Heads, KVHeads int
	QLen, KVLen           int // KVLen is the stored key length (the stride)
	HeadDim, ValueDim     int
	HeadsMajor            bool // Q and Out are BHSD
	KVHeadsMajor          bool // K and V are BHSD (a KV cache's layout, whatever Q's)
	// VInK: each V row is the first ValueDim elements of its K row (MLA's
	// absorbed form, V the latent prefix of K), read through K's storage
	// and strides; V, V16, V8 and VS are unused. Int8 V uses K's first
	// Int8Blocks(ValueDim) scales: V's blocks start where K's do, so any
	// ValueDim <= HeadDim reads the scale its elements were quantized with.
	VInK bool

	// BF16: both products on bfloat16 operands, summed in float32
	// (bf16.go); false is float32 throughout.
	BF16 bool
	// Q8: the int8 mode (K stored as int8): each scaled query row
	// quantized per block of 32 as K's rows are, q·kᵀ on the quantized
	// rows (q8.go); P·V as in float32.
	Q8 bool
	// PairV: the bfloat16 mode on a set with bfloat16 kernels, even head
	// dims and V of its own: a Regroup that rounds K and V also stores V
	// paired over keys (VPairs), once for every item. PairValues sets it.
	PairV bool
	// RoundInF32: the bfloat16 mode on the float32 kernels; a Regroup
	// copy then holds K and V as float32 rounded to bfloat16, which the
	// loop reads in place (KVRounded). PairValues sets it.
	RoundInF32 bool
	// KVRounded: K and V hold bfloat16 values already (such a copy), so
	// the mode's loop reads them as they are.
	KVRounded bool
	// VPairs is that copy: [B][KVHeads][(KVLen+1)/2][ValueDim], keys 2c
	// (low half) and 2c+1 (high half, 0 past the last key) of each column.
	VPairs []uint32
	// PairVT: PairV on a set with AMX tiles, whose flash loop runs PV
	// transposed (outcols.go): the copy holds V's columns paired over keys
	// (VTPairs) instead of VPairs. PairValues sets it.
	PairVT bool
	// VTPairs is that copy: [B][KVHeads][ValueDim][valueColumnStride(p)],
	// column d's keys 2c (low half) and 2c+1 (high half, 0 past the last
	// key) at c: each of V's columns a row of AMX's A operand.
	VTPairs []uint32

	Scale   float32 // folded into the packed Q block
	Softcap float32 // 0 = off

	Causal    bool
	OffsetSet bool // false: offset = key length of the batch - QLen (bottom-right)
	Offset    int  // query position i stands at key position i + offset
	Window    int  // 0 = off; with Causal a look-back, without it both ways

	KVLens []int // per batch, or nil for KVLen everywhere

	// PageKeys > 0 pages K and V (and int8 scales): key j of batch b lies
	// in block Pages[b][j/PageKeys], row j%PageKeys, each block
	// [KVHeads][PageKeys][dim] (KVHeadsMajor within a block; pages.go). A
	// negative entry is a released block whose keys no row sees.
	PageKeys int
	Pages    [][]int32

	Bias                           []float32 // [BiasBatch][BiasHeads][BiasQLen][KVLen], or nil
	BiasBatch, BiasHeads, BiasQLen int       // 1 or Batch / Heads / QLen

	Mask                           []bool // true = attend, [MaskBatch][MaskHeads][MaskQLen][KVLen], or nil
	MaskBatch, MaskHeads, MaskQLen int    // 1 or Batch / Heads / QLen

	Slopes []float32 // ALiBi: score += Slopes[h]·(j - (i + offset)); or nil
	Sinks  []float32 // a logit per query head in every softmax denominator; or nil
}

// row returns the offset of row (b, s, h) of a tensor with n heads, seqLen
// positions and rows of width dim (Q and Out: BHSD if HeadsMajor), and the
// stride between consecutive positions.
func (p *Problem) row(b, s, h, n, seqLen, dim int) (off, stride int) {
	return rowAt(p.HeadsMajor, b, s, h, n, seqLen, dim)
}

// kvRow is row for K (dim HeadDim) or V (ValueDim): key j of KV head g of
// batch b, in K and V's own layout (BHSD if KVHeadsMajor).
func (p *Problem) kvRow(b, j, g, dim int) (off, stride int) {
	if p.PageKeys > 0 {
		return p.pagedRow(b, j, g, dim), dim
	}
	return rowAt(p.KVHeadsMajor, b, j, g, p.KVHeads, p.KVLen, dim)
}

// rowAt is the layout arithmetic of row and kvRow: BHSD if headsMajor,
// else BSHD.
func rowAt(headsMajor bool, b, s, h, n, seqLen, dim int) (off, stride int) {
	if headsMajor {
		return ((b*n+h)*seqLen + s) * dim, dim
	}
	return ((b*seqLen+s)*n + h) * dim, n * dim
}

// keyLen returns the number of valid keys of batch b.
func (p *Problem) keyLen(b int) int {
	if p.KVLens != nil {
		return p.KVLens[b]
	}
	return p.KVLen
}

// maxKeyLen returns the longest key length of the batch.
func (p *Problem) maxKeyLen() int {
	if p.KVLens == nil {
		return p.KVLen
	}
	n := 0
	for _, k := range p.KVLens {
		n = max(n, k)
	}
	return n
}

// offset returns the causal offset of batch b: query position i sees key
// j <= i + offset.
func (p *Problem) offset(b int) int {
	if p.OffsetSet {
		return p.Offset
	}
	return p.keyLen(b) - p.QLen
}

// keyRange returns the keys [lo, hi) that query position i of batch b may
// see under the causal, window and key-length rules; hi <= lo means none.
func (p *Problem) keyRange(b, i int) (lo, hi int) {
	lo, hi = 0, p.keyLen(b)
	at := i + p.offset(b) // the query's key position
	if p.Causal {
		hi = min(hi, at+1)
	}
	if p.Window > 0 {
		lo = max(lo, at-p.Window+1)
		if !p.Causal {
			hi = min(hi, at+p.Window)
		}
	}
	return lo, hi
}

// posRange returns the query positions [lo, hi) of batch b that see key j
// (j below the key length): the inverse of keyRange.
func (p *Problem) posRange(b, j int) (lo, hi int) {
	lo, hi = 0, p.QLen
	at := j - p.offset(b) // the position at the key
	if p.Causal {
		lo = max(lo, at)
	}
	if p.Window > 0 {
		hi = min(hi, at+p.Window)
		if !p.Causal {
			lo = max(lo, at-p.Window+1)
		}
	}
	return lo, hi
}

// biasAt returns the index of the bias entry of query head h, position i,
// key j of batch b.
func (p *Problem) biasAt(b, h, i, j int) int {
	return fallback.Broadcast(b, h, i, j, p.BiasBatch, p.BiasHeads, p.BiasQLen, p.KVLen)
}

// maskAt returns the index of the mask entry of query head h, position i,
// key j of batch b.
func (p *Problem) maskAt(b, h, i, j int) int {
	return fallback.Broadcast(b, h, i, j, p.MaskBatch, p.MaskHeads, p.MaskQLen, p.KVLen)
}

// filtered reports whether the bias entry of query head h, position i,
// key j of batch b is -Inf or its mask entry false (the key is masked for
// that row).
func (p *Problem) filtered(b, h, i, j int) bool {
	return (p.Bias != nil && p.Bias[p.biasAt(b, h, i, j)] == negInf) ||
		(p.Mask != nil && !p.Mask[p.maskAt(b, h, i, j)])
}

// visible reports whether query head h at position i of batch b sees key j:
// j is inside its keyRange and neither bias nor mask masks it.
func (p *Problem) visible(b, h, i, j int) bool {
	lo, hi := p.keyRange(b, i)
	return j >= lo && j < hi && !p.filtered(b, h, i, j)
}

// seesKey reports whether query head h at position i of batch b sees at
// least one key. It is asked only of rows whose softmax sum is 0, to tell
// a row with nothing to see (zeros) from one whose every score was -Inf
// (NaN), so its scan of a bias row costs nothing in the common case.
func (p *Problem) seesKey(b, h, i int) bool {
	lo, hi := p.keyRange(b, i)
	for j := lo; j < hi; j++ {
		if !p.filtered(b, h, i, j) {
			return true
		}
	}
	return false
}

// kvRows returns the rows of K (value false) or V (value true) of KV head
// g of batch b from key j on, with their stride: on paged K/V only the
// rows up to the end of j's block (pageRun).
func (p *Problem) kvRows(b, j, g int, value bool) fallback.KVRows {
	dim, f, h, i8, sc := p.HeadDim, p.K, p.K16, p.K8, p.KS
	if value && !p.VInK {
		dim, f, h, i8, sc = p.ValueDim, p.V, p.V16, p.V8, p.VS
	}
	// dim is the row width of the storage; a V row inside K is read at K's.
	off, ld := p.kvRow(b, j, g, fallback.StoredWidth(p.KVType, dim))
	r := fallback.KVRows{Type: p.KVType, Ld: ld}
	switch p.KVType {
	case fallback.KVFloat32:
		r.F32 = f[off:]
	case fallback.KVInt8, fallback.KVInt4: // int4: K8/V8 carry the rows' bytes
		soff, lds := p.kvRow(b, j, g, fallback.Int8Blocks(dim))
		r.I8, r.S, r.LdS = i8[off:], sc[soff:], lds
	default:
		r.U16 = h[off:]
	}
	return r
}

// vWidth is the row width of V's storage: ValueDim, or HeadDim when V
// lies in K.
func (p *Problem) vWidth() int {
	if p.VInK {
		return p.HeadDim
	}
	return p.ValueDim
}
