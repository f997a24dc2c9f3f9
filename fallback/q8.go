package fallback

// QueryQ8 is query rows quantized for integer dot products against int8
// K (the int8 compute mode): row r's dk values in Q[r*Ld:], as
// QuantizeInt8 quantizes a K row (blocks of Int8Block, scale max|x|/127,
// round to nearest even), then zeros up to Ld; its Int8Blocks(dk) scales
// in S[r*nb:] and, per block, Corr[r*nb+b] = -128·Σ of the block's
// values (the term that undoes an unsigned kernel's +128 on K), with nb =
// Int8Blocks(dk). Row r stands for the float32 values float32(q)·scale
// (DequantizeInt8).
type QueryQ8 struct {
	Q    []int8
	S    []float32
	Corr []int32
	Ld   int
}

// QueryQ8Ld is the row stride of a QueryQ8 of head dim dk: its blocks,
// whole (the kernels read a block's 32 bytes, the zeros too).
func QueryQ8Ld(dk int) int { return Int8Blocks(dk) * Int8Block }

// QuantizeQuery fills q's rows 0..rows-1 from src ([rows][dk], finite),
// Ld = QueryQ8Ld(dk): each row quantized as QuantizeInt8, zeros to Ld, and
// the corrections.
func QuantizeQuery(q QueryQ8, src []float32, rows, dk int) {
	nb := Int8Blocks(dk)
	for r := range rows {
		row := q.Q[r*q.Ld : (r+1)*q.Ld]
		QuantizeInt8(row[:dk], q.S[r*nb:(r+1)*nb], src[r*dk:(r+1)*dk])
		clear(row[dk:])
		for b := range nb {
			sum := int32(0)
			for _, x := range row[b*Int8Block : (b+1)*Int8Block] {
				sum += int32(x)
			}
			q.Corr[r*nb+b] = -128 * sum
		}
	}
}

// DequantizeQuery writes the float32 values q's rows stand for to dst
// ([rows][dk]): the operands the float32 kernels multiply in the int8
// compute mode, whose products with int8 K are the integer kernels'.
func DequantizeQuery(dst []float32, q QueryQ8, rows, dk int) {
	nb := Int8Blocks(dk)
	for r := range rows {
		DequantizeInt8(dst[r*dk:(r+1)*dk], q.Q[r*q.Ld:r*q.Ld+dk], q.S[r*nb:(r+1)*nb])
	}
}
