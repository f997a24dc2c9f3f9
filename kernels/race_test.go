package kernels

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// TestRaceSeesKernels: under -race, two goroutines writing one output
// through an assembly kernel at once are reported as a data race (the
// annotations of race.go), as they would be in Go code. The racing calls
// run in a child process, which must fail with the detector's report.
func TestRaceSeesKernels(t *testing.T) {
	var asm *Set
	for _, ks := range Available() {
		if ks.Name != "generic" {
			asm = ks
			break
		}
	}
	if os.Getenv("FASTATTN_RACE_CHILD") == "1" {
		c := make([]float32, 8*64)
		a, b := make([]float32, 8*16), make([]float32, 16*64)
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				asm.Gemm(c, 64, a, 16, b, 64, 8, 64, 16, false) // both write all of c
			}()
		}
		wg.Wait()
		return
	}
	if !raceEnabled {
		t.Skip("needs -race")
	}
	if asm == nil {
		t.Skip("no assembly kernel set on this CPU")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRaceSeesKernels$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FASTATTN_RACE_CHILD=1", "FASTATTN_ISA="+asm.Name)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "WARNING: DATA RACE") || !strings.Contains(string(out), "racewriterange") {
		t.Fatalf("two goroutines writing one output through %s's Gemm were not reported (err %v):\n%s", asm.Name, err, out)
	}
}
