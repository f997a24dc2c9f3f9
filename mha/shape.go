// Package mha is fastattn's public API: scaled dot-product attention in the
// flash form (Attention, Engine) and the multi-head attention layer around
// it (Layer, with a KV cache for decoding).
//
// Tensors are flat row-major []float32. Every input is validated: bad input
// returns an error wrapping ErrShape, ErrBuffer, ErrOption, ErrCacheFull,
// ErrClosed or ErrNil that names the problem, never a panic and never a
// read past a slice. Sizes are checked against int overflow and against the
// memory the machine has (RAM and swap), since Go cannot recover from an
// allocation it cannot serve. Outputs (out, LSE, a cache being appended to)
// must not share memory with any input: that is ErrBuffer.
//
// # Non-finite values
//
// Every path and kernel set follows fallback.Attention, the float64
// reference, on NaN, Inf and overflow:
//
//   - A key a row does not see — causal, window, past its KVLens, or behind a
//     -Inf bias entry — contributes nothing to that row, whatever K and V
//     hold there (NaN and Inf included).
//   - Scores are float32: s = (Scale·q)·k. A score beyond ±MaxFloat32 is
//     ±Inf. Softcap maps +Inf to +Softcap and keeps -Inf; then the bias is
//     added.
//   - A score of NaN or +Inf for a key the row sees makes that row's output
//     and LSE NaN: so does NaN in q, in a visible key, or in a visible bias
//     entry, and a +Inf bias entry. NaN in a visible value reaches the
//     output columns it is in (the LSE does not depend on V).
//   - A score of -Inf weighs 0, like exp(-Inf), when the row sees other
//     keys with finite scores. A row all of whose visible scores are -Inf
//     (an overflow) is NaN, not zeros: the result depends on values float32
//     lost.
//   - A row that sees no key outputs zeros and an LSE of -Inf.
//
// Scale is limited to [0, MaxScale] and Softcap to 0 or [MinSoftcap,
// MaxFloat32], so that Scale·q and 1/Softcap stay finite for sane inputs.
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
// ValueDim; out like q with ValueDim.
type Shape struct {
	Batch    int // B >= 1
	Heads    int // H query heads >= 1
	KVHeads  int // key/value heads; 0 means Heads. Heads % KVHeads == 0; query head h reads KV head h/(Heads/KVHeads)
	QLen     int // query positions >= 1
	KVLen    int // stored key positions >= 1 (the stride of k and v; see Options.KVLens)
	HeadDim  int // Dk of q and k >= 1
	ValueDim int // Dv of v and out; 0 means HeadDim
	Layout   Layout
}

// Options are the optional parts of an attention call. The zero value (or a
// nil *Options) is plain non-causal softmax(q·kᵀ/sqrt(Dk))·v.
//
// A score is computed as s = Scale·(q·k); then s = Softcap·tanh(s/Softcap)
// if Softcap > 0; then s += bias; then masks (causal, window, key lengths,
// -Inf bias entries) set it to -Inf. A query row that sees no key outputs
// zeros and an LSE of -Inf. NaN, Inf and score overflow: see the package
// documentation.
type Options struct {
	// Causal masks key j for query row i unless j <= i + off. By default off
	// = (that batch's key length) - QLen: aligned bottom-right, so a new
	// token sees the whole cache and chunked prefill works.
	Causal bool
	// QueryOffset, when not nil, sets off explicitly: 0 is the top-left
	// alignment of PyTorch's is_causal; negative values are allowed. Used
	// only with Causal.
	QueryOffset *int
	// Window, when > 0 (with Causal), also masks key j unless
	// j > i + off - Window: each row sees at most Window keys.
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
	// [BiasBatch][BiasHeads][QLen][KVLen], broadcast over batch and head
	// where those are 1. -Inf entries mask. ALiBi is a bias.
	Bias []float32
	// BiasBatch is 1 (broadcast) or Batch; 0 means 1.
	BiasBatch int
	// BiasHeads is 1 (broadcast) or Heads; 0 means 1.
	BiasHeads int
	// LSE, when not nil, receives [B][Heads][QLen] log-sum-exp values: the
	// natural log of each row's softmax denominator, scale included, so
	// partial results can be merged.
	LSE []float32
	// Threads caps the workers this call uses; 0 means all of the engine's.
	Threads int
}
