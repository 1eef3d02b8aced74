package web

import (
	"testing"
	"time"
)

// TestCheckWait: the checks run every checkEvery while they are quick, and
// no more than about 2 % of the time once they take long (the
// reconciliation over a large history).
func TestCheckWait(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{0, checkEvery},
		{10 * time.Millisecond, checkEvery},
		{checkEvery / checkPace, checkEvery},
		{checkEvery/checkPace + time.Millisecond, checkEvery + checkPace*time.Millisecond},
		{3 * time.Second, 150 * time.Second},
	} {
		if got := checkWait(c.took, checkPace); got != c.want {
			t.Errorf("checkWait(%v) = %v, want %v", c.took, got, c.want)
		}
		if share := float64(c.took) / float64(c.took+checkWait(c.took, checkPace)); share > 1.0/float64(checkPace+1)+1e-9 {
			t.Errorf("checkWait(%v): the checks take %.3f of the time, over 1/%d", c.took, share, checkPace+1)
		}
	}
}

// TestCheckWaitPace: a pace of 1 waits checkEvery or the check's own time.
func TestCheckWaitPace(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{time.Second, checkEvery},
		{5 * time.Second, 5 * time.Second},
	} {
		if got := checkWait(c.took, 1); got != c.want {
			t.Errorf("checkWait(%v, 1) = %v, want %v", c.took, got, c.want)
		}
	}
}

// TestSampleWait: the page's figures are read every sampleEvery while a
// sample is quick, and at most about 2 % of the time once it is slow.
func TestSampleWait(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{0, sampleEvery},
		{time.Millisecond, sampleEvery},
		{sampleEvery / checkPace, sampleEvery},
		{60 * time.Millisecond, 3 * time.Second},
	} {
		if got := sampleWait(c.took, checkPace); got != c.want {
			t.Errorf("sampleWait(%v) = %v, want %v", c.took, got, c.want)
		}
		if share := float64(c.took) / float64(sampleWait(c.took, checkPace)); share > 1.0/float64(checkPace)+1e-9 {
			t.Errorf("sampleWait(%v): the samples take %.3f of the time, over 1/%d", c.took, share, checkPace)
		}
	}
}
