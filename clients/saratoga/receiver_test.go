package saratoga

import (
	"context"
	"crypto/md5"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// statusLog records the STATUS frames a receiver sends.
type statusLog struct {
	mu sync.Mutex
	st []*Status
}

func (l *statusLog) send(b []byte) error {
	f, err := Decode(b)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st = append(l.st, f.(*Status))
	return nil
}

func (l *statusLog) last() *Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.st) == 0 {
		return nil
	}
	return l.st[len(l.st)-1]
}

func runReceiver(t *testing.T, frames []any) (*receiver, *statusLog, []byte, error) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "sink"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := make(chan any, len(frames))
	for _, fr := range frames {
		in <- fr
	}
	var log statusLog
	r := newReceiver(receiverConfig{Session: 1, Descriptor: D32, Frame: FrameFor(DefaultMTU, 0), Timeout: time.Second}, f, log.send, in)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = r.run(ctx)
	got, rerr := os.ReadFile(f.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return r, &log, got, err
}

func TestReceiverOutOfOrderBeforeMetadata(t *testing.T) {
	data := []byte(strings.Repeat("saratoga", 100))
	sum := md5.Sum(data)
	meta := &Metadata{Descriptor: D32, ChecksumType: CsumMD5, Checksum: sum[:], Session: 1,
		Dirent: DirEnt{Descriptor: D32, Size: uint64(len(data)), Path: "x"}}
	frames := []any{
		&Data{Descriptor: D32, Session: 1, Offset: 500, Payload: data[500:], EOD: true, ReqStatus: true},
		&Data{Descriptor: D32, Session: 2, Offset: 0, Payload: make([]byte, 100)}, // other session: ignored
		&Data{Descriptor: D32, Session: 1, Offset: 200, Payload: data[200:500]},
		meta,
		&Data{Descriptor: D32, Session: 1, Offset: 0, Payload: data[:200]},
	}
	r, log, got, err := runReceiver(t, frames)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) || !r.checksumOK {
		t.Fatalf("file differs or checksum not ok")
	}
	first := log.st[0]
	if !first.MetadataMissing || first.Voluntary || first.InResponseTo != 500 || len(first.Holes) != 1 || first.Holes[0] != (Hole{0, 500}) {
		t.Fatalf("first status %+v", first)
	}
	if fin := log.last(); fin.Progress != uint64(len(data)) || len(fin.Holes) != 0 || fin.MetadataMissing || fin.Error != ErrSuccess {
		t.Fatalf("final status %+v", fin)
	}
}

func TestReceiverChecksumMismatch(t *testing.T) {
	data := []byte("hello world")
	meta := &Metadata{Descriptor: D32, ChecksumType: CsumMD5, Checksum: make([]byte, 16), Session: 1,
		Dirent: DirEnt{Descriptor: D32, Size: uint64(len(data)), Path: "x"}}
	_, log, _, err := runReceiver(t, []any{meta, &Data{Descriptor: D32, Session: 1, Payload: data, EOD: true}})
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("err = %v, want checksum mismatch", err)
	}
	if st := log.last(); st == nil || st.Error != ErrUnspecified {
		t.Fatalf("last status %+v, want error status", st)
	}
}

func TestReceiverTimeout(t *testing.T) {
	_, log, _, err := runReceiver(t, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want timeout", err)
	}
	if st := log.last(); st == nil || st.Error != ErrRxTimeout {
		t.Fatalf("last status %+v, want receiver timeout", st)
	}
}

func TestReceiverRejectsBeyondSize(t *testing.T) {
	data := []byte("abcd")
	sum := md5.Sum(data)
	meta := &Metadata{Descriptor: D32, ChecksumType: CsumMD5, Checksum: sum[:], Session: 1,
		Dirent: DirEnt{Descriptor: D32, Size: 4, Path: "x"}}
	r, _, got, err := runReceiver(t, []any{meta,
		&Data{Descriptor: D32, Session: 1, Offset: 2, Payload: []byte("cdEXTRA")},
		&Data{Descriptor: D32, Session: 1, Offset: 0, Payload: data}})
	if err != nil || string(got) != "abcd" || r.stats.DuplicateFrames != 1 {
		t.Fatalf("err %v, got %q, stats %+v", err, got, r.stats)
	}
}
