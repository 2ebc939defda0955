// Command hostsim stands in for the SSH servers of a simulated data centre: one process serves
// many hosts, each on its own loopback address with its own host key, authorized_keys and login
// user, and runs each host's commands inside that host's own sandbox (an argv prefix, usually
// bubblewrap, that the caller builds). Clients (OpenSSH, or pulumi-command's Go SSH client)
// connect to it exactly as to real hosts.
//
//	hostsim SPEC.json
//
// It prints {"ready": true, "hosts": N} on stdout once every host listens, and exits 0 on
// SIGTERM or SIGINT. A spec error exits 2 before any socket is opened.
package main

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// hostSpec is one simulated host, as the spec file gives it.
type hostSpec struct {
	Name           string   `json:"name"`
	Address        string   `json:"address"`
	Port           int      `json:"port"`
	HostKey        string   `json:"hostKey"`
	AuthorizedKeys string   `json:"authorizedKeys"`
	PasswordFile   string   `json:"passwordFile"` // a switch's admin logs in with a password
	User           string   `json:"user"`
	Exec           []string `json:"exec"`
	CallsLog       string   `json:"callsLog"`
	// NologinFile: while it exists, logins of any user but root are refused, as pam_nologin
	// refuses them while /run/nologin exists (`shutdown` writes it; the boot removes it).
	NologinFile string `json:"nologinFile"`
}

type spec struct {
	Hosts []hostSpec `json:"hosts"`
	Order string     `json:"order"` // optional: one log shared by all hosts
}

// host is a host ready to serve: its spec, listening address, SSH config and calls log.
type host struct {
	hostSpec
	addr   netip.AddrPort
	config *ssh.ServerConfig
	calls  *os.File // nil when the spec names no callsLog
}

// The simulated hosts must never be reachable from outside this machine: whatever the spec
// says, hostsim only ever binds loopback addresses.
var loopback = netip.MustParsePrefix("127.0.0.0/8")

// How long SIGTERM waits for running commands before killing them.
const drainTimeout = 5 * time.Second

func main() {
	log.SetFlags(0)
	log.SetPrefix("hostsim: ")
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hostsim SPEC.json")
		os.Exit(2)
	}
	s, err := readSpec(os.Args[1])
	if err == nil {
		err = validate(s)
	}
	if err != nil {
		log.Printf("%s: %v", os.Args[1], err)
		os.Exit(2)
	}
	srv, err := newServer(s)
	if err != nil {
		log.Printf("%s: %v", os.Args[1], err)
		os.Exit(2)
	}
	// Listen on every address before announcing readiness, so that a client started after the
	// ready line never sees a refused connection.
	var listeners []net.Listener
	for _, h := range srv.hosts {
		l, err := net.Listen("tcp4", h.addr.String())
		if err != nil {
			log.Printf("host %q: %v", h.Name, err)
			for _, l := range listeners {
				l.Close()
			}
			os.Exit(1)
		}
		listeners = append(listeners, l)
	}
	for i, h := range srv.hosts {
		go srv.accept(h, listeners[i])
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	ready, _ := json.Marshal(struct {
		Ready bool `json:"ready"`
		Hosts int  `json:"hosts"`
	}{true, len(srv.hosts)})
	os.Stdout.Write(append(ready, '\n')) // os.Stdout is unbuffered: no flush needed
	sig := <-stop
	log.Printf("%v: stopping", sig)
	for _, l := range listeners {
		l.Close()
	}
	srv.drain(drainTimeout)
	os.Exit(0)
}

func readSpec(path string) (*spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt field must not silently fall back to a default
	var s spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("not a valid spec: %w", err)
	}
	return &s, nil
}

// validate checks the whole spec before anything is opened: addresses first, since the one
// thing hostsim must never do is listen beyond loopback.
func validate(s *spec) error {
	if len(s.Hosts) == 0 {
		return errors.New("no hosts")
	}
	for _, h := range s.Hosts {
		a, err := netip.ParseAddr(h.Address)
		if err != nil || !a.Is4() || !loopback.Contains(a) {
			return fmt.Errorf("host %q: address %q is not an IPv4 address in %v: hostsim serves "+
				"loopback addresses only", h.Name, h.Address, loopback)
		}
	}
	names := map[string]bool{}
	addrs := map[netip.AddrPort]string{}
	for _, h := range s.Hosts {
		switch {
		case h.Name == "":
			return fmt.Errorf("a host at %q has no name", h.Address)
		case names[h.Name]:
			return fmt.Errorf("host %q is named twice", h.Name)
		case h.Port < 1 || h.Port > 65535:
			return fmt.Errorf("host %q: port %d is not in 1-65535", h.Name, h.Port)
		case h.HostKey == "" || h.User == "":
			return fmt.Errorf("host %q: hostKey and user are required", h.Name)
		case h.AuthorizedKeys == "" && h.PasswordFile == "":
			return fmt.Errorf("host %q: authorizedKeys or passwordFile is required", h.Name)
		case len(h.Exec) == 0:
			// Without a sandbox prefix the command would run on this machine itself.
			return fmt.Errorf("host %q: exec (the sandbox's argv prefix) is empty", h.Name)
		}
		names[h.Name] = true
		ap := netip.AddrPortFrom(netip.MustParseAddr(h.Address), uint16(h.Port))
		if other, dup := addrs[ap]; dup {
			return fmt.Errorf("hosts %q and %q both use %v", other, h.Name, ap)
		}
		addrs[ap] = h.Name
	}
	return nil
}

// newServer reads every host's keys and opens the logs; it opens no socket.
func newServer(s *spec) (*server, error) {
	srv := &server{running: map[*run]bool{}}
	var err error
	if s.Order != "" {
		if srv.order, err = openLog(s.Order); err != nil {
			return nil, err
		}
	}
	for _, hs := range s.Hosts {
		h := &host{hostSpec: hs}
		h.addr = netip.AddrPortFrom(netip.MustParseAddr(hs.Address), uint16(hs.Port))
		if h.config, err = sshConfig(hs); err != nil {
			return nil, fmt.Errorf("host %q: %w", hs.Name, err)
		}
		if hs.CallsLog != "" {
			if h.calls, err = openLog(hs.CallsLog); err != nil {
				return nil, fmt.Errorf("host %q: %w", hs.Name, err)
			}
		}
		srv.hosts = append(srv.hosts, h)
	}
	return srv, nil
}

func openLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// sshConfig: the host's own ed25519 key; public-key authentication against the keys its
// authorized_keys held at start and/or (a switch) the password in passwordFile, for the one
// user. The ssh package refuses every method without a callback (keyboard-interactive always).
func sshConfig(h hostSpec) (*ssh.ServerConfig, error) {
	pem, err := os.ReadFile(h.HostKey)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.HostKey, err)
	}
	if t := signer.PublicKey().Type(); t != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("%s: a %s key; the hosts use ed25519 host keys", h.HostKey, t)
	}
	config := &ssh.ServerConfig{ServerVersion: "SSH-2.0-hostsim"}
	if h.AuthorizedKeys != "" {
		keys, err := authorizedKeys(h.AuthorizedKeys)
		if err != nil {
			return nil, err
		}
		config.PublicKeyCallback = func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if c.User() != h.User {
				return nil, fmt.Errorf("user %q is not %q", c.User(), h.User)
			}
			if err := nologin(h, c.User()); err != nil {
				return nil, err
			}
			if !keys[string(key.Marshal())] {
				return nil, fmt.Errorf("key %s is not authorized", ssh.FingerprintSHA256(key))
			}
			return nil, nil
		}
	}
	if h.PasswordFile != "" {
		want, err := os.ReadFile(h.PasswordFile)
		if err != nil {
			return nil, err
		}
		want = bytes.TrimRight(want, "\n")
		if len(want) == 0 {
			return nil, fmt.Errorf("%s: empty password", h.PasswordFile)
		}
		config.PasswordCallback = func(c ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
			if c.User() != h.User || subtle.ConstantTimeCompare(password, want) != 1 {
				return nil, errors.New("wrong user or password")
			}
			if err := nologin(h, c.User()); err != nil {
				return nil, err
			}
			return nil, nil
		}
	}
	config.AddHostKey(signer)
	return config, nil
}

// nologin refuses a login while the host is going down (its nologinFile exists), except root's.
func nologin(h hostSpec, user string) error {
	if h.NologinFile == "" || user == "root" {
		return nil
	}
	if msg, err := os.ReadFile(h.NologinFile); err == nil {
		return fmt.Errorf("logins are refused: %s", bytes.TrimSpace(msg))
	}
	return nil
}

// authorizedKeys reads an OpenSSH authorized_keys file. Key options (from=, command=,
// restrict, ...) would not be honoured here, so a key that has any is refused outright.
func authorizedKeys(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for {
		// Like sshd, this skips blank lines, comments and lines it cannot parse; it fails
		// only when no key is left.
		key, _, options, rest, err := ssh.ParseAuthorizedKey(data)
		if err != nil {
			break
		}
		if len(options) > 0 {
			return nil, fmt.Errorf("%s: key %s has options %v, which hostsim does not honour",
				path, ssh.FingerprintSHA256(key), options)
		}
		keys[string(key.Marshal())] = true
		data = rest
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", path)
	}
	return keys, nil
}
