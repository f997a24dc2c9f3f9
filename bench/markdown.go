package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// writeMarkdown reads the records of a -json run from r and writes its
// rows as the README's markdown table: the machine and its limits in a
// line above, then one line per row with its time and its share of the
// limit it is measured against (prefill, GEMM and layer forward rows: the
// FMA, bfloat16-dot or AMX peak the run measured; decode rows: its
// streaming-read probe). Shared-prefix and serving records are left out.
func writeMarkdown(w io.Writer, r io.Reader) error {
	var m Machine
	var rows []Row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			return fmt.Errorf("-md: not a -json record: %w", err)
		}
		switch kind.Kind {
		case "machine":
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				return err
			}
		case "attention", "layer", "layer decode", "gemm":
			var row Row
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if m.CPU == "" {
		return fmt.Errorf("-md: the run has no machine record (was it made with -json?)")
	}
	fmt.Fprintf(w, "%s, %d cores; one thread: %s; read probe %.1f GB/s.\n\n", m.CPU, m.Cores, m.peaks(), m.BW1)
	fmt.Fprintln(w, "| set | row | threads | time | of its limit |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		label := fmt.Sprintf("%s `%s`", r.Kind, r.Shape)
		for _, part := range []string{r.Mask, r.Layout} {
			if part != "" && part != "-" {
				label += " " + part
			}
		}
		if r.KV != "" && r.KV != "-" {
			label += " kv " + r.KV
		}
		if r.Weights != "" {
			label += " w " + r.Weights
		}
		if r.Compute != "" && r.Compute != "f32" {
			label += " mode " + r.Compute
		}
		limit := "-"
		switch {
		case r.PctBW > 0:
			limit = fmt.Sprintf("%.0f%% of the read probe (%.0f tok/s)", r.PctBW, r.TokPerS)
		case r.PctPeak > 0:
			limit = fmt.Sprintf("%.0f%% of the %s peak (%.1f GFLOP/s)", r.PctPeak, r.Engine, r.GFLOPS)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.3g ms | %s |\n", r.ISA, strings.Join(strings.Fields(label), " "), r.Threads, r.MedianMs, limit)
	}
	return nil
}

// peaks lists the machine's one-thread peaks per set: FMA, bfloat16 dot
// product and AMX tiles.
func (m Machine) peaks() string {
	var peaks []string
	for _, set := range sortedKeys(m.Peak1) {
		peaks = append(peaks, fmt.Sprintf("%s FMA peak %.0f GFLOP/s", set, m.Peak1[set]))
	}
	for _, set := range sortedKeys(m.BF16Peak1) {
		peaks = append(peaks, fmt.Sprintf("%s bf16 dot peak %.0f", set, m.BF16Peak1[set]))
	}
	for _, set := range sortedKeys(m.AMXPeak1) {
		peaks = append(peaks, fmt.Sprintf("%s AMX peak %.0f", set, m.AMXPeak1[set]))
	}
	return strings.Join(peaks, ", ")
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// markdownFile runs writeMarkdown on a file to stdout.
func markdownFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeMarkdown(os.Stdout, f)
}
