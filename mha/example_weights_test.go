package mha_test

import (
	"encoding/binary"
	"fmt"
	"log"

	"github.com/fastattn/fastattn/mha"
)

// A layer whose weights stay in bfloat16, as a Hugging Face safetensors
// checkpoint stores them: each tensor's bytes (little-endian, [out][in]
// like nn.Linear's weight) read as uint16 and given as is. The layer keeps
// them in bfloat16, packed for its kernels, half the memory of float32;
// quantized int8 tensors (WQ8, ...) and float16 ones work the same way.
func ExampleWeights_checkpoint() {
	cfg := mha.LayerConfig{DModel: 4, Heads: 2, HeadDim: 2}
	// The bytes a safetensors file would hold for a [4][4] BF16 tensor:
	// here an identity matrix, 1.0 being 0x3f80.
	identity := make([]byte, 2*4*4)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint16(identity[2*(i*4+i):], 0x3f80)
	}
	bits := func(b []byte) []uint16 {
		u := make([]uint16, len(b)/2)
		for i := range u {
			u[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return u
	}
	w := mha.Weights{Type: mha.BFloat16, OutIn: true,
		WQ16: bits(identity), WK16: bits(identity), WV16: bits(identity), WO16: bits(identity)}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	// One token through identity projections: attention over a single
	// key returns its value, the token itself.
	x := []float32{1, 2, 3, 4}
	out := make([]float32, 4)
	if err := layer.Forward(out, x, 1, 1, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output:
	// [1 2 3 4]
}
