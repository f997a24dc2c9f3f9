package mha

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/tile"
)

// MLAConfig is a multi-head latent attention layer (DeepSeek V2 and V3,
// Kimi K2) as its config.json states it. Every head's key is built from
// one shared latent: kv_a_proj_with_mqa projects a token to KVLoraRank
// latent values (then RMS-normed) and RopeDim rotary values shared by all
// heads; kv_b_proj expands the latent to each head's NopeDim key values
// and VHeadDim value values.
type MLAConfig struct {
	DModel     int // hidden_size
	Heads      int // num_attention_heads
	QLoraRank  int // q_lora_rank; 0 (null) for a plain q_proj (DeepSeek-V2-Lite)
	KVLoraRank int // kv_lora_rank
	NopeDim    int // qk_nope_head_dim
	RopeDim    int // qk_rope_head_dim: even
	VHeadDim   int // v_head_dim
	// Rotary rotates the RopeDim rotary values of queries and keys: Base
	// is rope_theta, Scaling rope_scaling (DeepSeek V3: yarn with mscale
	// and mscale_all_dim), Interleaved rope_interleave (true in DeepSeek
	// V3's config; V2's code pairs (2i, 2i+1) too). Dims must be 0 or
	// RopeDim.
	Rotary Rotary
	// NormEps is rms_norm_eps of q_a_layernorm and kv_a_layernorm; 0
	// means 1e-6.
	NormEps float32
}

// MLAWeights are an MLA layer's checkpoint tensors, float32, each
// [out][in] as PyTorch's nn.Linear stores them (a safetensors file's
// layout; convert bfloat16 ones with Widen16). DeepSeek's attention has
// no biases.
type MLAWeights struct {
	WQ      []float32 // q_proj.weight, [Heads·(NopeDim+RopeDim)][DModel], when QLoraRank is 0
	WQA     []float32 // q_a_proj.weight, [QLoraRank][DModel]
	QANorm  []float32 // q_a_layernorm.weight, [QLoraRank]
	WQB     []float32 // q_b_proj.weight, [Heads·(NopeDim+RopeDim)][QLoraRank]
	WKVA    []float32 // kv_a_proj_with_mqa.weight, [KVLoraRank+RopeDim][DModel]
	KVANorm []float32 // kv_a_layernorm.weight, [KVLoraRank]
	WKVB    []float32 // kv_b_proj.weight, [Heads·(NopeDim+VHeadDim)][KVLoraRank]
	WO      []float32 // o_proj.weight, [DModel][Heads·VHeadDim]
	// Type is the type the layer keeps its matrices in (Weights.Type):
	// the absorbed ones below are computed in float32 from the given
	// tensors, then rounded or quantized once.
	Type DType
}

// mlaParts is what a layer from NewMLALayer does beyond the generic one.
type mlaParts struct {
	qa     tile.Packed // q_a_proj packed ([DModel][QLoraRank]); K = 0 when there is none
	qaNorm qkNorm      // q_a_layernorm over a row's QLoraRank values
	kvNorm qkNorm      // kv_a_layernorm over a key's first KVLoraRank values (the latent)
	lat    int         // KVLoraRank: a key is its latent, then the RopeDim rotary values
	scale  float32     // the softmax scale: (NopeDim+RopeDim)^-1/2, times yarn's m² (DeepSeek V3)
}

// NewMLALayer returns the layer of an MLA configuration in absorbed form,
// running on e (nil means Default()), so that a decode step reads one
// latent row per token for all heads. With c the normed latent and k_r
// the rotated rotary values of a token, HF transformers' attention per
// head h,
//
//	score = q_nope_h·(W_UK_h c) + q_rope_h·k_r,  out_h = W_UV_h Σ p·c
//
// (W_UK_h and W_UV_h head h's rows of kv_b_proj), is computed as
//
//	score = (W_UK_hᵀ q_nope_h)·c + q_rope_h·k_r
//
// with the absorbed query projection (q_b_proj's, or q_proj's, nope rows
// of head h multiplied by W_UK_hᵀ: Heads·(KVLoraRank+RopeDim) outputs) and
// the absorbed output projection (o_proj's columns of head h times W_UV_h:
// Heads·KVLoraRank inputs). The layer is a Layer with HeadDim =
// KVLoraRank + RopeDim, ValueDim = KVLoraRank, one KV head and ValueInKey
// (its Config says so; NewLayer cannot rebuild it from that): Forward,
// Decode, DecodeSeqs, DecodeTree, its caches (the latent and rotary
// values only: (KVLoraRank+RopeDim) elements per token) and their copies
// work as for any layer. Cross-attention is refused (ErrOption).
//
// Its softmax scale, when Options.Scale is 0, is (NopeDim+RopeDim)^-1/2,
// times YarnSoftmaxScale(Factor, MScaleAllDim) — already m², applied once —
// under yarn scaling with MScaleAllDim set, as DeepSeek's code and
// transformers compute it; a Factor of 0 means there, as for the rotary,
// MaxPositions/OriginalMaxPositions. q_a_layernorm and
// kv_a_layernorm are RMSNorms with float32 sums, as transformers'. The
// absorption runs on e's GEMM (its float32 rounding), once; absorbed
// matrices are larger than the checkpoint's (the query projection by
// (KVLoraRank+RopeDim)/(NopeDim+RopeDim), the output one by
// KVLoraRank/VHeadDim), which is the price of reading the latent once.
//
// A missing or mis-sized tensor is ErrBuffer naming it, a NaN or ±Inf
// ErrNonFinite naming the tensor and index, a bad size ErrShape.
func NewMLALayer(e *Engine, cfg MLAConfig, w MLAWeights) (*Layer, error) {
	e, err := openOr(e)
	if err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"DModel", cfg.DModel}, {"Heads", cfg.Heads}, {"KVLoraRank", cfg.KVLoraRank}, {"NopeDim", cfg.NopeDim},
		{"RopeDim", cfg.RopeDim}, {"VHeadDim", cfg.VHeadDim}} {
		if d.v < 1 {
			return nil, fmt.Errorf("%w: MLAConfig.%s = %d, must be >= 1", ErrShape, d.name, d.v)
		}
	}
	if cfg.QLoraRank < 0 || cfg.RopeDim%2 != 0 {
		return nil, fmt.Errorf("%w: MLAConfig QLoraRank = %d (>= 0), RopeDim = %d (even)", ErrShape, cfg.QLoraRank, cfg.RopeDim)
	}
	if cfg.Rotary.Dims != 0 && cfg.Rotary.Dims != cfg.RopeDim {
		return nil, fmt.Errorf("%w: MLAConfig.Rotary.Dims = %d, must be 0 or RopeDim = %d", ErrOption, cfg.Rotary.Dims, cfg.RopeDim)
	}
	H, dm, lat, rd, nope, vd := cfg.Heads, cfg.DModel, cfg.KVLoraRank, cfg.RopeDim, cfg.NopeDim, cfg.VHeadDim
	qIn := dm
	if cfg.QLoraRank > 0 {
		qIn = cfg.QLoraRank
	}
	// The sizes of every tensor and of the absorbed matrices, checked
	// before any product is formed.
	dims := [][]int{{H, nope + rd, qIn}, {lat + rd, dm}, {H, nope + vd, lat}, {dm, H, vd}, {H, lat + rd, qIn}, {dm, H, lat}}
	for _, d := range dims {
		if _, ok := product(d...); !ok {
			return nil, overflow("MLA tensor", d)
		}
	}
	if err := checkAlloc("the absorbed MLA matrices", uint64(H)*uint64(lat+rd)*uint64(qIn)+uint64(dm)*uint64(H)*uint64(lat)); err != nil {
		return nil, err
	}
	tensors := []givenMatrix{{name: "WKVA", f32: w.WKVA, in: dm, out: lat + rd}, {name: "KVANorm", f32: w.KVANorm, in: 1, out: lat},
		{name: "WKVB", f32: w.WKVB, in: lat, out: H * (nope + vd)}, {name: "WO", f32: w.WO, in: H * vd, out: dm}}
	wqa := givenMatrix{name: "WQA", f32: w.WQA, in: dm, out: qIn} // q_a_proj, packed below when q_lora is on
	if cfg.QLoraRank > 0 {
		if w.WQ != nil {
			return nil, fmt.Errorf("%w: MLAWeights.WQ is q_proj, for QLoraRank 0; with q_lora_rank %d give WQA, QANorm and WQB", ErrOption, cfg.QLoraRank)
		}
		tensors = append(tensors, wqa, givenMatrix{name: "QANorm", f32: w.QANorm, in: 1, out: qIn},
			givenMatrix{name: "WQB", f32: w.WQB, in: qIn, out: H * (nope + rd)})
	} else {
		if w.WQA != nil || w.QANorm != nil || w.WQB != nil {
			return nil, fmt.Errorf("%w: MLAWeights.WQA, QANorm and WQB need QLoraRank > 0; with none give WQ (q_proj)", ErrOption)
		}
		tensors = append(tensors, givenMatrix{name: "WQ", f32: w.WQ, in: dm, out: H * (nope + rd)})
	}
	for _, g := range tensors {
		if g.f32 == nil {
			return nil, fmt.Errorf("%w: MLAWeights.%s is missing (%d×%d values)", ErrBuffer, g.name, g.out, g.in)
		}
		if err := g.check(Float32, w.Type, true); err != nil {
			return nil, err
		}
	}
	eps, err := normEps(cfg.NormEps)
	if err != nil {
		return nil, err
	}
	wq, wo, err := absorbMLA(e, cfg, w, qIn)
	if err != nil {
		return nil, err
	}
	rot := cfg.Rotary
	rot.Dims = rd
	lcfg := LayerConfig{DModel: dm, Heads: H, KVHeads: 1, HeadDim: lat + rd, ValueDim: lat, ValueInKey: true, Rotary: rot, NormEps: cfg.NormEps}
	l, err := newLayer(e, lcfg, Weights{WQ: wq, WK: w.WKVA, WO: wo, OutIn: true, Type: w.Type}, qIn)
	if err != nil {
		return nil, err
	}
	m := &mlaParts{lat: lat, scale: float32(1 / math.Sqrt(float64(nope+rd)))}
	if sc := rot.Scaling; sc != nil && sc.Type == "yarn" && sc.MScaleAllDim != 0 {
		m.scale *= float32(YarnSoftmaxScale(sc.factor(), sc.MScaleAllDim)) // the factor rotary resolved (Factor 0 too)
	}
	if m.kvNorm, err = newQKNorm("KVANorm", w.KVANorm, 1, lat, eps); err != nil {
		return nil, err
	}
	if cfg.QLoraRank > 0 {
		cols := tile.PanelCols(e.ks)
		m.qa = wqa.pack(Float32, w.Type, true, 0, qIn, cols)
		if m.qaNorm, err = newQKNorm("QANorm", w.QANorm, 1, qIn, eps); err != nil {
			return nil, err
		}
	}
	l.mla = m
	return l, nil
}

// absorbMLA returns the absorbed query projection, [Heads·(lat+rd)][qIn],
// and output projection, [DModel][Heads·lat], both [out][in], computed on
// e's GEMM: per head, W_UK_hᵀ times the nope rows of the query projection
// (its rotary rows copied), and o_proj's columns times W_UV_h.
func absorbMLA(e *Engine, cfg MLAConfig, w MLAWeights, qIn int) (wq, wo []float32, err error) {
	H, dm, lat, rd, nope, vd := cfg.Heads, cfg.DModel, cfg.KVLoraRank, cfg.RopeDim, cfg.NopeDim, cfg.VHeadDim
	src := w.WQ
	if cfg.QLoraRank > 0 {
		src = w.WQB
	}
	dk, qk, kv := lat+rd, nope+rd, nope+vd
	wq, wo = make([]float32, H*dk*qIn), make([]float32, dm*H*lat)
	ukT := make([]float32, lat*nope)
	if err := e.acquire(); err != nil {
		return nil, nil, err
	}
	defer e.release()
	cols := tile.PanelCols(e.ks)
	var c call // every worker, no cancellation
	for h := 0; h < H; h++ {
		uk := w.WKVB[h*kv*lat : (h*kv+nope)*lat] // W_UK_h, [nope][lat]
		for n := 0; n < nope; n++ {
			for j := 0; j < lat; j++ {
				ukT[j*nope+n] = uk[n*lat+j]
			}
		}
		// Rows h·dk .. h·dk+lat: W_UK_hᵀ [lat][nope] · the nope rows [nope][qIn].
		b := tile.PackB(src[h*qk*qIn:(h*qk+nope)*qIn], nope, qIn, cols)
		e.gemm(tile.Gemm{A: ukT, LDA: nope, B: b, C: wq[h*dk*qIn:], LDC: qIn, M: lat}, c)
		copy(wq[(h*dk+lat)*qIn:(h+1)*dk*qIn], src[(h*qk+nope)*qIn:(h+1)*qk*qIn])
		// Columns h·lat .. of WO': o_proj's columns of head h [dm][vd] · W_UV_h [vd][lat].
		uv := tile.PackB(w.WKVB[(h*kv+nope)*lat:(h+1)*kv*lat], vd, lat, cols)
		e.gemm(tile.Gemm{A: w.WO[h*vd:], LDA: H * vd, B: uv, C: wo[h*lat:], LDC: H * lat, M: dm}, c)
	}
	return wq, wo, nil
}

// projectQ projects m rows of x into the queries sc.q: one GEMM, or for
// an MLA layer with a low-rank stage, q_a_proj, its RMSNorm and the
// absorbed q_b_proj.
func (l *Layer) projectQ(sc *layerScratch, x []float32, m int, c call) bool {
	if l.mla == nil || l.mla.qa.K == 0 {
		return l.project(sc, sc.q, x, &l.w.q, l.w.bq, m, c)
	}
	r := l.mla.qa.N
	sc.qa = sized(sc.qa, m*r)
	if !l.project(sc, sc.qa, x, &l.mla.qa, nil, m, c) {
		return false
	}
	l.mla.qaNorm.transform(&l.rope, sc.qa[:m*r], m, r, nil) // each row its own norm (no angles: no rotation)
	return l.project(sc, sc.q, sc.qa, &l.w.q, l.w.bq, m, c)
}

// transformQ rotates the rotary values (the last RopeDim of each head's
// HeadDim) of one token's queries by the angles cs (nil: none).
func (m *mlaParts) transformQ(ro *rope, q []float32, heads, dk int, cs []float32) {
	if cs == nil {
		return
	}
	for h := 0; h < heads; h++ {
		ro.apply(q[h*dk+m.lat:(h+1)*dk], cs, 1, nil)
	}
}

// transformK norms one token's key latent (its first lat values) and
// rotates its rotary values by cs (nil: none).
func (m *mlaParts) transformK(ro *rope, k []float32, cs []float32) {
	m.kvNorm.transform(ro, k[:m.lat], 1, m.lat, nil)
	if cs != nil {
		ro.apply(k[m.lat:], cs, 1, nil)
	}
}

// mlaScale returns opts, or for an MLA layer whose opts leave Scale 0 a
// copy in sc with the layer's softmax scale.
func (l *Layer) mlaScale(sc *layerScratch, opts *Options) *Options {
	if l.mla == nil || opts != nil && opts.Scale != 0 {
		return opts
	}
	sc.opts = Options{}
	if opts != nil {
		sc.opts = *opts
	}
	sc.opts.Scale = l.mla.scale
	return &sc.opts
}

// bytes is the memory of an MLA layer's low-rank query stage and norms.
func (m *mlaParts) bytes() int64 {
	if m == nil {
		return 0
	}
	return m.qa.Bytes() + 4*int64(len(m.qaNorm.w)+len(m.kvNorm.w))
}
