// Package mha computes multi-head attention on CPUs: scaled dot-product
// attention in the flash form (Attention, Engine) and the multi-head
// attention layer around it (Layer: Q/K/V/O projections, GQA and MQA,
// rotary embeddings, QK-norm, and a KV cache for decoding), on generated
// AVX-512, AVX2 and NEON kernels chosen at run time, without cgo.
//
// A first call: softmax(Q·Kᵀ/√d)·V for one sequence of 4 heads, causal.
//
//	shape := mha.Shape{Batch: 1, Heads: 4, QLen: 16, KVLen: 16, HeadDim: 64}
//	q := make([]float32, 1*16*4*64) // [batch][seq][head][dim], as X·W_Q gives it
//	k := make([]float32, len(q))
//	v := make([]float32, len(q))
//	out := make([]float32, len(q))
//	err := mha.Attention(out, q, k, v, shape, &mha.Options{Causal: true})
//
// A model's attention layer decodes through a Layer and its Cache:
//
//	layer, err := mha.NewLayer(nil, mha.LayerConfig{DModel: 512, Heads: 8, KVHeads: 2, HeadDim: 64,
//		Rotary: mha.Rotary{Dims: 64, Base: 10000}}, mha.Weights{WQ: wq, WK: wk, WV: wv, WO: wo})
//	cache, err := layer.NewCache(1, 4096)           // one sequence of up to 4096 tokens
//	err = layer.Decode(out, prompt, cache, 12, nil) // 12 prompt tokens: [12][DModel]
//	err = layer.Decode(out, next, cache, 1, nil)    // then one token per step
//
// A server holding many conversations uses a PagedCache instead: a pool of
// blocks sized in bytes, sequences added and freed at any time, forks of a
// shared prompt by reference, and DecodePaged, which computes the
// attention of sequences sharing a prompt to it once for all of them:
//
//	pool, err := layer.NewPagedCache(mha.PagedConfig{Type: mha.BFloat16, Bytes: 8 << 30})
//	sys, err := pool.NewSeq()
//	err = layer.DecodePaged(ctx, out, system, pool, []mha.SeqID{sys}, []int{len(system) / 512}, nil)
//	chat, err := pool.Fork(sys, n) // a request on the system prompt: no row copied
//
// The Examples run all three; docs/PORTING.md in the repository maps ONNX,
// PyTorch, Hugging Face and llama.cpp attention onto these options.
//
// Tensors are flat row-major []float32. Every input is validated: bad input
// returns an error wrapping one of the package's sentinels (ErrShape,
// ErrBuffer, ErrOption, ErrCacheFull, ErrBusy, ErrNonFinite, ErrClosed,
// ErrNil, ErrISA) that names the problem, never a panic and never a
// read past a slice. Sizes are checked against int overflow and against the
// memory the machine has (RAM and swap), since Go cannot recover from an
// allocation it cannot serve. Outputs (out, LSE, a cache being appended to)
// must not share memory with any input: that is ErrBuffer.
//
// # Contexts
//
// One convention, kept from here to v1: a call that a program often makes
// outside a server comes as a pair, X and XContext(ctx, …) (Attention,
// Attention16, AttentionInt8, AttentionInt4, Forward, ForwardCross, NewCrossKV, Cross,
// Decode), X being XContext with context.Background(); a call made only
// from a serving loop takes ctx as its first argument and has no pair
// (DecodeSeqs, DecodeTree, DecodePaged, DecodePagedTree). In both, a nil ctx means
// context.Background(), and a ctx done before or during the call stops it
// between work items with ctx.Err(); a cache is then as it was before.
//
// # Non-finite values
//
// Every path and kernel set follows the float64 reference the tests check
// them against, on NaN, Inf and overflow:
//
//   - A key a row does not see — causal, window, past its KVLens, behind a
//     -Inf bias entry or a false mask entry — contributes nothing to that
//     row, whatever K and V hold there (NaN and Inf included).
//   - Scores are float32: s = (Scale·q)·k. A score beyond ±MaxFloat32 is
//     ±Inf. Softcap maps +Inf to +Softcap and keeps -Inf; then the bias is
//     added, then the ALiBi term.
//   - A score of NaN or +Inf for a key the row sees makes that row's output
//     and LSE NaN: so does NaN in q, in a visible key, or in a visible bias
//     entry, and a +Inf bias entry. NaN in a visible value reaches the
//     output columns it is in (the LSE does not depend on V).
//   - A score of -Inf weighs 0, like exp(-Inf), when the row sees other
//     keys with finite scores. A row all of whose visible scores are -Inf
//     (an overflow) is NaN, not zeros: the result depends on values float32
//     lost.
//   - A row that sees no key outputs zeros and an LSE of -Inf (with Sinks:
//     the sink).
//   - Weights are float32: a key whose weight is below the smallest normal
//     float32 relative to the row's largest (its score ~87 or more below
//     it, or below the sink) weighs exactly 0, and a ±Inf in its value row
//     then gives NaN, where exact arithmetic would give ±Inf.
//
// A KV cache never holds a value it cannot store finitely: a token whose K
// or V is NaN or ±Inf, or beyond a 16-bit cache's range, is refused with
// ErrNonFinite and nothing of that call is appended, whatever the cache's
// type (Attention and its variants, which keep nothing, follow the rules
// above instead).
//
// Scale is limited to [0, MaxScale] and Softcap to 0 or [MinSoftcap,
// MaxFloat32], so that Scale·q and 1/Softcap stay finite for sane inputs.
package mha
