package mha

// Layout is the order of a Q, K, V or output tensor's dimensions.
type Layout int

const (
	// BSHD is [batch][seq][head][dim]: what X·W reshaped gives (the default).
	BSHD Layout = iota
	// BHSD is [batch][head][seq][dim].
	BHSD
)

// String returns "BSHD" or "BHSD".
func (l Layout) String() string {
	switch l {
	case BSHD:
		return "BSHD"
	case BHSD:
		return "BHSD"
	}
	return "Layout(?)"
}

// Shape gives the dimensions of an attention call.
//
// q is [B][QLen][Heads][HeadDim] (BSHD) or [B][Heads][QLen][HeadDim] (BHSD);
// k is the same with KVHeads and KVLen; v with KVHeads, KVLen and
// ValueDim (or nothing, with ValueInKey); out like q with ValueDim.
type Shape struct {
	Batch    int // B >= 1
	Heads    int // H query heads >= 1
	KVHeads  int // key/value heads; 0 means Heads. Heads % KVHeads == 0; query head h reads KV head h/(Heads/KVHeads)
	QLen     int // query positions >= 1
	KVLen    int // stored key positions >= 1 (the stride of k and v; see Options.KVLens)
	HeadDim  int // Dk of q and k >= 1
	ValueDim int // Dv of v and out; 0 means HeadDim
	Layout   Layout
	// ValueInKey says V is not a tensor of its own: each value row is the
	// first ValueDim elements of its key row (ValueDim <= HeadDim), and v
	// (its scales too, for int8) must be empty. It is MLA's absorbed
	// decode (DeepSeek V2/V3, Kimi K2: one KV head of Dk = 576, the 512
	// latent dimensions then 64 rotary ones, and Dv = 512, V the latent):
	// the call reads each key row once for both products, not K and a copy
	// of its prefix. Every option and storage type holds.
	ValueInKey bool
}

// Options are the optional parts of an attention call. The zero value (or a
// nil *Options) is plain non-causal softmax(q·kᵀ/sqrt(Dk))·v.
//
// A score is computed as s = Scale·(q·k); then s = Softcap·tanh(s/Softcap)
// if Softcap > 0; then the bias and the ALiBi term are added; then masks
// (causal, window, key lengths, -Inf bias entries, false mask entries) set
// it to -Inf. The softmax runs over the keys a row sees and the row's sink,
// if any. A query row that sees no key outputs zeros and an LSE of -Inf
// (the sink, with Sinks). NaN, Inf and score overflow: see the package
// documentation.
//
// Positions: query row i of batch b stands at key position i + off, where
// off = (that batch's key length) - QLen unless QueryOffset sets it. The
// causal mask, the window and ALiBi all measure from there.
type Options struct {
	// Causal masks key j for query row i unless j <= i + off. By default off
	// = (that batch's key length) - QLen: aligned bottom-right, so a new
	// token sees the whole cache and chunked prefill works.
	Causal bool
	// QueryOffset, when not nil, sets off explicitly: 0 is the top-left
	// alignment of PyTorch's is_causal; negative values are allowed. Used
	// by Causal, Window and ALiBi.
	QueryOffset *int
	// Window, when > 0, masks key j unless j > i + off - Window: with
	// Causal each row sees at most Window keys (a sliding window). Without
	// Causal it also masks j >= i + off + Window: the keys within Window-1
	// positions either side (bidirectional local attention, 2·Window-1
	// keys). Keys outside the window cost nothing.
	Window int
	// Softcap, when > 0, caps scores smoothly to (-Softcap, Softcap). It
	// is 0 or in [MinSoftcap, MaxFloat32].
	Softcap float32
	// Scale multiplies q·k; 0 means 1/sqrt(HeadDim). At most MaxScale.
	Scale float32
	// KVLens, when not nil, holds B key lengths in [0, KVLen]: keys at or
	// past KVLens[b] are masked for batch b (padding, varlen, KV caches).
	KVLens []int
	// Bias, when not nil, is added to the scores:
	// [BiasBatch][BiasHeads][BiasQLen][KVLen], broadcast over each of
	// batch, head and query row whose size is 1. -Inf entries mask. A
	// key-padding bias is [B][1][1][KVLen]: B·KVLen floats.
	Bias []float32
	// BiasBatch is 1 (broadcast) or Batch; 0 means 1.
	BiasBatch int
	// BiasHeads is 1 (broadcast) or Heads; 0 means 1.
	BiasHeads int
	// BiasQLen is 1 (broadcast over query rows) or QLen; 0 means QLen.
	BiasQLen int
	// Mask, when not nil, keeps key j for a query row where it is true and
	// masks it where false (true = attend, as ONNX Attention and PyTorch
	// SDPA): [MaskBatch][MaskHeads][MaskQLen][KVLen], broadcast like Bias.
	// A row whose keys are all false sees none: zeros, LSE -Inf.
	Mask []bool
	// MaskBatch is 1 (broadcast) or Batch; 0 means 1.
	MaskBatch int
	// MaskHeads is 1 (broadcast) or Heads; 0 means 1.
	MaskHeads int
	// MaskQLen is 1 (broadcast over query rows) or QLen; 0 means QLen.
	MaskQLen int
	// ALiBi, when not nil, holds one slope per query head: the score of
	// query row i of head h and key j gains ALiBi[h]·(j - (i + off)),
	// computed in the loop (no tensor of it in memory). ALiBiSlopes gives
	// the standard slopes. Under Causal the distance is never positive
	// (the ALiBi paper, BLOOM, llama.cpp); without it keys after the
	// query's position get a positive term (BLOOM's slope·j, shifted; the
	// softmax is the same). Each slope is finite, |slope| <= MaxSlope.
	// The distances are float32 integers, exact below 2^24: with ALiBi,
	// QLen + KVLen + |QueryOffset| must stay below MaxALiBiSpan (ErrOption).
	ALiBi []float32
	// Sinks, when not nil, holds one logit per query head (an attention
	// sink: gpt-oss, StreamingLLM, ONNX GroupQueryAttention's head_sink):
	// it joins each row's softmax denominator and contributes no value,
	//
	//	out = Σ_j e^{s_j}·v_j / (e^{sink_h} + Σ_j e^{s_j})
	//
	// and the LSE includes it. A row that sees no key outputs zeros and
	// its LSE is the sink. Each sink is finite.
	Sinks []float32
	// OutLSE, when not nil, receives [B][Heads][QLen] log-sum-exp values: the
	// natural log of each row's softmax denominator, scale included, so
	// partial results can be merged (see Merge).
	OutLSE []float32
	// Threads caps the workers this call uses; 0 means all of the engine's.
	Threads int
	// Compute is the arithmetic of the two products: ComputeF32 (the zero
	// value), ComputeBF16 (bfloat16 operands, float32 sums) or, over int8
	// or int4 K, ComputeInt8 (query rows quantized to int8, integer dot
	// products).
	Compute Compute
}
