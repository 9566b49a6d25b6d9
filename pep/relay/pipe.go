package relay

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Pipe is a kernel pipe used as the zero-copy transit buffer of splice.
type Pipe struct {
	r, w int
}

func (p *Pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// PipePool hands out pipes of one size. A relay direction holds a pipe
// only while bytes are moving and returns it (empty) when its source runs
// dry, so idle connections cost no pipe and no file descriptors; the pool
// keeps a few spares to avoid pipe2/fcntl on every burst.
type PipePool struct {
	size int
	keep int

	mu    sync.Mutex
	free  []*Pipe
	inUse int

	undersized atomic.Int64
}

// NewPipePool returns a pool of pipes of size bytes, keeping at most keep
// idle pipes.
func NewPipePool(size, keep int) *PipePool {
	return &PipePool{size: size, keep: keep}
}

// Size is the capacity of each pipe, i.e. the most data one relay
// direction holds in the PEP outside the two sockets' buffers.
func (pp *PipePool) Size() int { return pp.size }

// Get returns an empty pipe.
func (pp *PipePool) Get() (*Pipe, error) {
	pp.mu.Lock()
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free = pp.free[:n-1]
		pp.inUse++
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	p := &Pipe{r: fds[0], w: fds[1]}
	_, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pp.size)
	switch {
	case errors.Is(err, unix.EPERM):
		// Unprivileged (e.g. a container without CAP_SYS_RESOURCE) and
		// over fs.pipe-max-size or the user's pipe-user-pages quota: a
		// smaller pipe only means more splice calls, so use it as it is.
		pp.undersized.Add(1)
	case err != nil:
		p.close()
		return nil, fmt.Errorf("F_SETPIPE_SZ %d: %w", pp.size, err)
	}
	pp.mu.Lock()
	pp.inUse++
	pp.mu.Unlock()
	return p, nil
}

// Undersized counts pipes the kernel would not grow to the pool's size.
func (pp *PipePool) Undersized() int64 { return pp.undersized.Load() }

// InUse is the number of pipes currently held by relay directions.
func (pp *PipePool) InUse() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.inUse
}

// Put returns an empty pipe to the pool. Pipes that may still hold data
// must be discarded with Discard instead.
func (pp *PipePool) Put(p *Pipe) {
	pp.mu.Lock()
	pp.inUse--
	if len(pp.free) < pp.keep {
		pp.free = append(pp.free, p)
		pp.mu.Unlock()
		return
	}
	pp.mu.Unlock()
	p.close()
}

// Discard closes a pipe whose contents are no longer wanted.
func (pp *PipePool) Discard(p *Pipe) {
	pp.mu.Lock()
	pp.inUse--
	pp.mu.Unlock()
	p.close()
}

// Close releases the spare pipes.
func (pp *PipePool) Close() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, p := range pp.free {
		p.close()
	}
	pp.free = nil
}
