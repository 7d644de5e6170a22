// Command failure-recap reads a `go test -v` log and, for every test that
// failed, prints the last lines the test body wrote: where its failure
// message is. A QEMU scenario's failure message is followed by its
// cleanup reports (the cluster's state, the boot timeline) and then by
// the output of every test that ran after it, so the tail of a long log,
// all a CI summary shows, does not hold it. make's QEMU targets run it on
// a failed log.
//
// A test's lines are those after a `=== RUN|CONT|NAME|PAUSE <test>`
// header. A test body that ends failed may log EndMarker (bodyEnded in
// the qemu-tests package): its recap stops there, before its cleanups.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// EndMarker is the line a failed test body logs as it ends; the qemu-tests
// package logs the same text.
const EndMarker = "kiln-test: the test body ended failed; its cleanup reports follow"

var (
	header = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	// result is a test's result line; a top-level one (not indented)
	// ends its test's output: what follows (FAIL, ok, the package's
	// lines) is no test's until the next header.
	result = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(`)
)

// testLog is what one test wrote, up to its end marker if it logged one.
type testLog struct {
	lines []string
	ended bool // the end marker was seen: later lines are cleanups
}

// recap returns, in the order the tests failed, each failed test's last n
// lines before its end marker.
func recap(r io.Reader, n int) ([]string, map[string][]string, error) {
	logs := map[string]*testLog{}
	var order []string
	current := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := header.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := result.FindStringSubmatch(line); m != nil {
			if m[2] == "FAIL" {
				order = append(order, m[3])
			}
			if m[1] == "" {
				current = ""
			}
			continue
		}
		if current == "" {
			continue
		}
		l := logs[current]
		if l == nil {
			l = &testLog{}
			logs[current] = l
		}
		if l.ended {
			continue
		}
		if strings.Contains(line, EndMarker) {
			l.ended = true
			continue
		}
		l.lines = append(l.lines, line)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	out := map[string][]string{}
	for _, name := range order {
		var lines []string
		if l := logs[name]; l != nil {
			lines = l.lines[max(0, len(l.lines)-n):]
		}
		out[name] = lines
	}
	return order, out, nil
}

func main() {
	n := flag.Int("lines", 12, "how many of each failed test's last lines to print")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: failure-recap [-lines N] [go-test-v.log]\n\n"+
			"Prints, for each failed test in a `go test -v` log (standard input if no file),\n"+
			"the last lines its body wrote, where the failure message is.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	in := io.Reader(os.Stdin)
	if path := flag.Arg(0); path != "" {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "failure-recap:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	order, lines, err := recap(in, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failure-recap: reading the log:", err)
		os.Exit(1)
	}
	if len(order) == 0 {
		return
	}
	fmt.Printf("=== failure recap: the last lines of each failed test's body\n")
	for _, name := range order {
		fmt.Printf("--- %s\n", name)
		for _, l := range lines[name] {
			fmt.Println(l)
		}
	}
}
