package localcluster

import (
	"fmt"
	"strings"
	"testing"
)

// A Go panic prints its cause first and then a stack longer than the tail shown: the
// report must still say what the panic was.
func TestLogExcerptKeepsThePanicAboveTheTail(t *testing.T) {
	var log strings.Builder
	log.WriteString("starting\npanic: assignment to entry in nil map\n\ngoroutine 1 [running]:\n")
	for i := range 40 {
		fmt.Fprintf(&log, "frame%d()\n", i)
	}
	got := logExcerpt(log.String(), 20)
	if !strings.Contains(got, "panic: assignment to entry in nil map") {
		t.Errorf("the excerpt lost the panic's cause:%s", got)
	}
	if !strings.Contains(got, "frame39()") || strings.Contains(got, "frame19()") {
		t.Errorf("the excerpt is not the panic and the last 20 lines:%s", got)
	}
}

// A component started again after a crash: its new exit is reported with its own
// lines, never with the cause of the crash before.
func TestLogExcerptLeavesAnEarlierStartsPanic(t *testing.T) {
	log := "panic: first crash\n" + strings.Repeat("frame()\n", 30) + "--- localcluster: start 2 of kwok\n" +
		strings.Repeat("serving\n", 30) + "error: second exit\n"
	got := logExcerpt(log, 5)
	if strings.Contains(got, "first crash") {
		t.Errorf("the excerpt shows the previous start's panic:%s", got)
	}
	if !strings.Contains(got, "error: second exit") {
		t.Errorf("the excerpt lost the last line:%s", got)
	}
}

func TestLogExcerptOfAShortLog(t *testing.T) {
	if got, want := logExcerpt("one\ntwo\n", 20), "\n  one\n  two"; got != want {
		t.Errorf("logExcerpt = %q, want %q", got, want)
	}
}
