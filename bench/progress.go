package main

import (
	"fmt"
	"os"
	"time"
)

// progress reports, on stderr, which row is being measured, how long the
// run has taken and about how long it has left, so the table on stdout
// stays a table. On a terminal it is one line rewritten in place and
// erased at the end; elsewhere (a log, a pipe) a line per row.
type progress struct {
	total, n int
	start    time.Time
	tty      bool
	shown    bool
}

// newProgress starts the report of a run of total rows, each timed for at
// least minTime, and says up front about how long the run will take.
func newProgress(total int, minTime time.Duration) *progress {
	p := &progress{total: total, start: time.Now()}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		p.tty = true
	}
	// Each row: its own timing and gonum's (minTime each at least), and
	// the peak loops around it; a rough guess, replaced by the measured
	// pace from the first row on.
	guess := time.Duration(total) * (2*minTime + 800*time.Millisecond)
	fmt.Fprintf(os.Stderr, "bench: %d rows, about %s (progress on stderr, the table on stdout)\n", total, roundDuration(guess))
	return p
}

// step announces the next row.
func (p *progress) step(what string) {
	p.n++
	elapsed := time.Since(p.start)
	left := ""
	if p.n > 1 {
		per := elapsed / time.Duration(p.n-1)
		left = fmt.Sprintf(", about %s left", roundDuration(per*time.Duration(p.total-p.n+1)))
	}
	line := fmt.Sprintf("[%d/%d %s%s] %s", p.n, p.total, roundDuration(elapsed), left, what)
	if p.tty {
		fmt.Fprintf(os.Stderr, "\r%s\033[K", line)
		p.shown = true
		return
	}
	fmt.Fprintln(os.Stderr, line)
}

// done erases the progress line on a terminal (once).
func (p *progress) done() {
	if p.tty && p.shown {
		fmt.Fprint(os.Stderr, "\r\033[K")
		p.shown = false
	}
}

// roundDuration rounds d to seconds (minutes and seconds past a minute).
func roundDuration(d time.Duration) string {
	return d.Round(time.Second).String()
}
