package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// server is what all hosts share: the sequence of commands, the order log and the set of
// running commands that a shutdown waits for.
type server struct {
	hosts []*host
	order *os.File
	logMu sync.Mutex // every log line is written under it, in one write: lines never interleave

	mu       sync.Mutex
	seq      int64 // the last sequence number given out
	stopping bool  // set by SIGTERM: no new command starts
	running  map[*run]bool
	wg       sync.WaitGroup // one per running command
}

// run is one exec request's process, killed as a group when its client goes away.
type run struct {
	rec record // what its log line will say

	mu    sync.Mutex
	pid   int  // 0 until started
	ended bool // reaped, failed to start or killed before it started: nothing left to kill
}

// record is a calls-log line. Never stdin: it carries credentials.
type record struct {
	Seq        int64     `json:"seq"`
	Start      time.Time `json:"start"` // encoded as RFC 3339 with nanoseconds
	End        time.Time `json:"end"`
	Host       string    `json:"host"`
	Command    string    `json:"command"`
	StdinBytes int64     `json:"stdinBytes"`
	Exit       int       `json:"exit"`             // 128+N when killed by signal N, as a shell says
	Signal     string    `json:"signal,omitempty"` // its name (RFC 4254: "KILL", "TERM", ...)
	EnvRefused []string  `json:"envRefused"`       // names only: values may be secrets
}

func (srv *server) accept(h *host, l net.Listener) {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors and the like: wait, as net/http does
			log.Printf("%s: accept: %v", h.Name, err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go srv.serveConn(h, c)
	}
}

func (srv *server) serveConn(h *host, c net.Conn) {
	// A client that never completes the handshake must not hold the connection forever.
	c.SetDeadline(time.Now().Add(time.Minute))
	conn, chans, reqs, err := ssh.NewServerConn(c, h.config)
	if err != nil {
		log.Printf("%s: %v: refused: %v", h.Name, c.RemoteAddr(), err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	defer conn.Close()
	// Global requests (tcpip-forward, streamlocal-forward, keepalives) are all answered no.
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" { // direct-tcpip and the like: no port forwarding
			nc.Reject(ssh.Prohibited, "only session channels are served")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go srv.session(h, conn, ch, creqs)
	}
}

// session answers one channel's requests: one exec; env refused (a stock sshd without
// AcceptEnv) but its names remembered for the log; pty-req, shell, subsystem, x11-req and
// anything else refused.
func (srv *server) session(h *host, conn *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	envRefused := []string{}
	var r *run
	for req := range reqs {
		switch {
		case req.Type == "env":
			var kv struct{ Name, Value string }
			ssh.Unmarshal(req.Payload, &kv)
			envRefused = append(envRefused, kv.Name)
			log.Printf("%s: refused env request for %q", h.Name, kv.Name)
			req.Reply(false, nil)
		case req.Type == "exec" && r == nil:
			var p struct{ Command string }
			if ssh.Unmarshal(req.Payload, &p) == nil {
				r = srv.reserve(h, p.Command, append([]string{}, envRefused...))
			}
			// The reply goes first, as sshd's does: a Go client whose channel closed before
			// it had its reply would report EOF instead of the command's exit status.
			req.Reply(r != nil, nil)
			if r != nil {
				srv.launch(h, conn, ch, r)
			}
		default:
			req.Reply(false, nil)
		}
	}
	// The request channel closes with the channel: after the command ended and we closed it,
	// or because the client closed it or went away mid-command. Then nobody reads the output,
	// and the command is killed, as sshd's closing of its pipes would end it.
	if r != nil {
		r.kill()
	}
	ch.Close()
}

// reserve gives a command its sequence number and counts it as running; nil when hostsim is
// stopping. Under srv.mu, so that a shutdown cannot slip in between the check and wg.Add.
func (srv *server) reserve(h *host, command string, envRefused []string) *run {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.stopping {
		return nil
	}
	srv.seq++
	r := &run{rec: record{Seq: srv.seq, Start: time.Now().UTC(), Host: h.Name, Command: command,
		EnvRefused: envRefused}}
	srv.running[r] = true
	srv.wg.Add(1)
	return r
}

// launch runs the command in the host's sandbox with the channel as stdin, stdout and stderr.
func (srv *server) launch(h *host, conn *ssh.ServerConn, ch ssh.Channel, r *run) {
	argv := append(append([]string{}, h.Exec...), "bash", "-c", r.rec.Command)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = loginEnv(h, conn)
	// Its own process group, so that a disconnect kills everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = ch
	cmd.Stderr = ch.Stderr()
	stdin, err := cmd.StdinPipe()
	r.mu.Lock()
	if err == nil && r.ended {
		err = errors.New("killed before it started")
	}
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		r.pid = cmd.Process.Pid
	}
	r.ended = err != nil
	r.mu.Unlock()
	var stdinBytes atomic.Int64
	if err == nil {
		// Not cmd.Stdin = ch: Wait would then wait for the client's EOF, which a client
		// need not send before the command ends.
		go func() {
			io.Copy(countingWriter{stdin, &stdinBytes}, ch)
			stdin.Close()
		}()
	} else {
		fmt.Fprintf(ch.Stderr(), "hostsim: %s: cannot start %s: %v\n", h.Name, argv[0], err)
		r.rec.Exit = 127
	}
	go srv.finish(h, ch, r, cmd, &stdinBytes)
}

// finish waits for the command, logs it, and only then reports its exit to the client, so that
// a client that has its result also finds its log line.
func (srv *server) finish(h *host, ch ssh.Channel, r *run, cmd *exec.Cmd,
	stdinBytes *atomic.Int64) {
	defer srv.wg.Done()
	rec := r.rec
	req, payload := "exit-status", ssh.Marshal(struct{ Status uint32 }{uint32(rec.Exit)})
	if cmd.Process != nil {
		cmd.Wait() // its error is the exit status or a closed channel: ProcessState says which
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			rec.Signal = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
			rec.Exit = 128 + int(ws.Signal())
			req, payload = "exit-signal", ssh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}{rec.Signal, ws.CoreDump(), "", ""})
		} else {
			rec.Exit = ws.ExitStatus()
			payload = ssh.Marshal(struct{ Status uint32 }{uint32(rec.Exit)})
		}
	}
	srv.mu.Lock()
	delete(srv.running, r)
	srv.mu.Unlock()
	rec.End = time.Now().UTC()
	rec.StdinBytes = stdinBytes.Load()
	srv.writeLog(h, rec)
	// The exit status before EOF: a client may close the channel as soon as it has EOF (an
	// OpenSSH ControlMaster does, for a multiplexed session whose stdin has ended), and once
	// it has, x/crypto/ssh answers the close and sends nothing more on the channel: the
	// multiplexed client would exit 255 with its output complete.
	ch.SendRequest(req, false, payload)
	ch.CloseWrite()
	ch.Close()
}

func (srv *server) writeLog(h *host, rec record) {
	var line bytes.Buffer
	enc := json.NewEncoder(&line) // one line, ending in a newline
	enc.SetEscapeHTML(false)      // commands stay readable: && not \u0026\u0026
	enc.Encode(rec)
	srv.logMu.Lock()
	defer srv.logMu.Unlock()
	for _, f := range []*os.File{h.calls, srv.order} {
		if f == nil {
			continue
		}
		if _, err := f.Write(line.Bytes()); err != nil {
			log.Printf("%s: %v", f.Name(), err)
		}
	}
}

// kill ends the command's process group unless it has already been reaped (its pid, and so
// the group's id, could then be another process's); one not started yet never starts.
func (r *run) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended && r.pid != 0 {
		syscall.Kill(-r.pid, syscall.SIGKILL)
	}
	r.ended = true
}

// drain stops new commands, gives running ones `timeout` to end, then kills them.
func (srv *server) drain(timeout time.Duration) {
	srv.mu.Lock()
	srv.stopping = true
	srv.mu.Unlock()
	done := make(chan struct{})
	go func() {
		srv.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(timeout):
	}
	srv.mu.Lock()
	log.Printf("killing %d commands still running", len(srv.running))
	for r := range srv.running {
		r.kill()
	}
	srv.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		log.Printf("commands still not finished; exiting anyway")
	}
}

// loginEnv is what sshd gives a login: the sandbox gets none of hostsim's own environment
// (the caller's may hold secrets). PATH is Ubuntu's /etc/environment, which PAM sets.
func loginEnv(h *host, conn *ssh.ServerConn) []string {
	home := "/home/" + h.User
	if h.User == "root" {
		home = "/root"
	}
	remote, _ := conn.RemoteAddr().(*net.TCPAddr)
	local, _ := conn.LocalAddr().(*net.TCPAddr)
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games:/snap/bin",
		"USER=" + h.User, "LOGNAME=" + h.User, "HOME=" + home, "SHELL=/bin/bash",
	}
	if remote != nil && local != nil {
		env = append(env,
			fmt.Sprintf("SSH_CLIENT=%s %d %d", remote.IP, remote.Port, local.Port),
			fmt.Sprintf("SSH_CONNECTION=%s %d %s %d", remote.IP, remote.Port, local.IP, local.Port))
	}
	return env
}

// countingWriter counts the stdin bytes delivered to the command (the number is logged, the
// bytes never are).
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
