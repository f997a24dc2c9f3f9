package mha

import (
	"os"
	"testing"
)

func TestZZGQA(t *testing.T) {
	if os.Getenv("ZZGQA") == "" {
		t.Skip()
	}
	e, err := NewEngine(Config{ISA: "avx512", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	H, Hkv, L, D := 32, 8, 8192, 128
	lay := BHSD
	if os.Getenv("ZZBSHD") != "" {
		lay = BSHD
	}
	sh := Shape{Batch: 1, Heads: H, KVHeads: Hkv, QLen: 1, KVLen: L, HeadDim: D, Layout: lay}
	q, out := make([]float32, H*D), make([]float32, H*D)
	k, v := make([]uint16, L*Hkv*D), make([]uint16, L*Hkv*D)
	for i := range k {
		k[i], v[i] = 0x3c00+uint16(i%97), 0x3800+uint16(i%89)
	}
	for i := range q {
		q[i] = float32(i%13) * 0.01
	}
	for i := 0; i < 2000; i++ {
		if err := e.Attention16(out, q, k, v, Float16, sh, nil); err != nil {
			t.Fatal(err)
		}
	}
}
