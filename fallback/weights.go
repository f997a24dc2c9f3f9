package fallback

// WeightRows is a block of a projection weight matrix as a layer keeps
// it: rows of Ld elements of Type (row p holds the weights of input p for
// Ld consecutive outputs) in F32, U16 (16-bit floats) or I8. Int8 rows
// share a float32 scale per column and block of Int8Block rows: the
// scale of element (p, j) is S[(p/Int8Block)·Ld + j], so a block of the
// matrix starts on a multiple of Int8Block rows. (Along the input
// dimension, as GGUF's q8_0 and ONNX's MatMulNBits block a weight row.)
type WeightRows struct {
	Type KVType
	F32  []float32
	U16  []uint16
	I8   []int8
	S    []float32
	Ld   int
}

// Len returns the number of elements the rows' slice holds.
func (w WeightRows) Len() int {
	switch w.Type {
	case KVFloat32:
		return len(w.F32)
	case KVInt8:
		return len(w.I8)
	}
	return len(w.U16)
}

// WidenWeights writes k rows of n elements of w as float32 at stride ldd
// in dst: 16-bit values widened exactly, int8 ones as float32(q)·scale,
// rounded once (the value the kernels multiply by).
func WidenWeights(dst []float32, ldd int, w WeightRows, k, n int) {
	for p := 0; p < k; p++ {
		d := dst[p*ldd : p*ldd+n]
		switch w.Type {
		case KVFloat32:
			copy(d, w.F32[p*w.Ld:])
		case KVInt8:
			q, s := w.I8[p*w.Ld:][:n], w.S[p/Int8Block*w.Ld:][:n]
			for j, x := range q {
				d[j] = float32(x) * s[j]
			}
		default:
			Widen(d, w.U16[p*w.Ld:][:n], w.Type)
		}
	}
}
