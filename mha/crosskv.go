package mha

import (
	"context"
	"fmt"
)

// CrossKV holds the keys and values of a cross-attention context — an
// encoder's output, projected once (Whisper's and T5's decoders attend to
// the same encoder states at every step). K and V are
// [Batch][Len][KVHeads][dim], with the layer's KNorm applied (no rotary:
// cross-attention has no shared positions). A CrossKV is read-only once
// made, so any number of calls may use it at once.
type CrossKV struct {
	K, V []float32

	layer      *Layer
	batch, len int
}

// NewCrossKV projects xkv, [batch][kvLen][DModel], into a CrossKV for
// Layer.Cross.
func (l *Layer) NewCrossKV(xkv []float32, batch, kvLen int) (*CrossKV, error) {
	return l.NewCrossKVContext(context.Background(), xkv, batch, kvLen)
}

// NewCrossKVContext is NewCrossKV that stops when ctx is done and returns
// ctx.Err() and no CrossKV.
func (l *Layer) NewCrossKVContext(ctx context.Context, xkv []float32, batch, kvLen int) (*CrossKV, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	c, err := callOf(ctx, nil)
	if err != nil {
		return nil, err
	}
	if l.mla != nil {
		return nil, fmt.Errorf("%w: an MLA layer (NewMLALayer) does no cross-attention", ErrOption)
	}
	cfg := l.cfg
	if batch < 1 || kvLen < 1 {
		return nil, fmt.Errorf("%w: CrossKV batch = %d, kvLen = %d, both must be >= 1", ErrShape, batch, kvLen)
	}
	if err := needLen("xkv", len(xkv), batch, kvLen, cfg.DModel); err != nil {
		return nil, err
	}
	nk, err := allocFloats("CrossKV K", batch, kvLen, cfg.KVHeads, cfg.HeadDim)
	if err != nil {
		return nil, err
	}
	nv, err := allocFloats("CrossKV V", batch, kvLen, cfg.KVHeads, cfg.storedV())
	if err != nil {
		return nil, err
	}
	if err := checkAlloc("the CrossKV", uint64(nk)+uint64(nv)); err != nil {
		return nil, err
	}
	kv := &CrossKV{K: make([]float32, nk), V: make([]float32, nv), layer: l, batch: batch, len: kvLen}
	l.reserve(nil)
	if err := l.e.acquire(); err != nil {
		return nil, err
	}
	defer l.e.release()
	m := batch * kvLen
	sc := l.getScratch()
	defer l.putScratch(sc)
	if !(l.projectKV(sc, kv.K, kv.V, xkv, m, c) && l.prepare(prepWork{k: kv.K, kRows: m}, c)) {
		return nil, ctx.Err()
	}
	return kv, nil
}

// Batch returns the number of sequences (0 for a nil CrossKV).
func (kv *CrossKV) Batch() int {
	if kv == nil {
		return 0
	}
	return kv.batch
}

// Len returns the number of encoder positions (0 for a nil CrossKV).
func (kv *CrossKV) Len() int {
	if kv == nil {
		return 0
	}
	return kv.len
}

// Cross runs cross-attention of xq, [Batch][qLen][DModel], to kv into
// out, [Batch][qLen][DModel]: ForwardCross without projecting the encoder
// output again. opts (may be nil) apply to the attention as in
// ForwardCross (KVLens for padded encoder outputs, Bias, Mask, ...).
func (l *Layer) Cross(out, xq []float32, kv *CrossKV, qLen int, opts *Options) error {
	return l.CrossContext(context.Background(), out, xq, kv, qLen, opts)
}

// CrossContext is Cross that stops when ctx is done, as ForwardContext.
func (l *Layer) CrossContext(ctx context.Context, out, xq []float32, kv *CrossKV, qLen int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if kv == nil || kv.layer == nil {
		return fmt.Errorf("%w: CrossKV (make one with Layer.NewCrossKV)", ErrNil)
	}
	if kv.layer != l {
		return fmt.Errorf("%w: CrossKV was not made by this layer", ErrOption)
	}
	return l.forward(ctx, out, xq, nil, kv, kv.batch, qLen, kv.len, opts, false)
}
