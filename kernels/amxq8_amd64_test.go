//go:build amd64 && !purego

package kernels

import (
	"errors"
	"testing"
)

// TestAMXInt8Chosen: the avx512 set runs ScoresQ8 on AMX-INT8 tiles only
// where they work and FASTATTN_AMX asks for them, and AMXInt8 offers the
// native kernel exactly where it works.
func TestAMXInt8Chosen(t *testing.T) {
	broken := errAMXInt8Test
	for _, c := range []struct {
		works error
		env   string
		on    bool
	}{{nil, AMXInt8On, true}, {nil, "", false}, {nil, "off", false}, {nil, "on", false}, {broken, AMXInt8On, false}, {broken, "", false}} {
		err := amxInt8Chosen(c.works, c.env)
		if (err == nil) != c.on {
			t.Errorf("works %v, %s=%q: chosen %v, want on %v", c.works, EnvAMX, c.env, err, c.on)
		}
		if c.works != nil && err != c.works {
			t.Errorf("works %v: the reason given is %v", c.works, err)
		}
	}
	if ks := AMXInt8(); (ks != nil) != (amxInt8Works == nil) {
		t.Errorf("AMXInt8 %v where the tiles' verdict is %v", ks, amxInt8Works)
	} else if ks != nil && !ks.HasScoresQ8() {
		t.Error("AMXInt8's set has no ScoresQ8")
	}
	if AMXInt8Status() == nil && amxInt8Works != nil {
		t.Errorf("AMX-INT8 chosen where it does not work: %v", amxInt8Works)
	}
	t.Logf("AMX-INT8 works: %v; chosen: %v", amxInt8Works, AMXInt8Status())
}

var errAMXInt8Test = errors.New("the tiles fail")
