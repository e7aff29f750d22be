package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// natsServerPkg is the nats-server of go.mod, built for the scenarios that
// run the server as a process of its own (soak), so that its memory shows
// apart from the relay's and this program's.
const natsServerPkg = "github.com/nats-io/nats-server/v2"

// serverProc is a nats-server process with JetStream in a directory of its
// own, on a loopback port.
type serverProc struct {
	cmd     *exec.Cmd
	url     string
	logPath string
	done    chan struct{}
	err     error // how it exited; set before done is closed
}

// natsServerBin builds the nats-server of go.mod once per run, into work.
func (e *env) natsServerBin(ctx context.Context) (string, error) {
	bin := filepath.Join(e.work, "nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintln(os.Stderr, "building", natsServerPkg)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, natsServerPkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w", natsServerPkg, err)
	}
	return bin, nil
}

// startServerProc starts bin with JetStream in dir/jetstream, its log to
// logPath, and returns once it answers a JetStream request.
func startServerProc(ctx context.Context, bin, dir, logPath string) (*serverProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats-server.conf")
	listen := "127.0.0.1:" + strconv.Itoa(port)
	body := fmt.Sprintf("server_name: bench\nlisten: %q\njetstream { store_dir: %q }\n", listen, filepath.Join(dir, "jetstream"))
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &serverProc{url: "nats://" + listen, logPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-c", conf)
	p.cmd.Dir = dir
	p.cmd.Env = withoutUserEnv(os.Environ())
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	ownProcess(p.cmd)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting nats-server: %w", err)
	}
	logFile.Close()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if nc, err := nats.Connect(p.url, nats.Name("bench/engine probe")); err == nil {
			_, err = nc.JetStream()
			if err == nil {
				_, err = nc.Request("$JS.API.INFO", nil, 2*time.Second)
			}
			nc.Close()
			if err == nil {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("nats-server exited before it was ready (%v); its log: %s\n%s", p.err, logPath, tail(logPath, 20))
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), p.stop())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("nats-server not ready after 30 s; its log: %s\n%s", logPath, tail(logPath, 20)), p.stop())
		}
	}
}

// pid is the server process's, for /proc.
func (p *serverProc) pid() int { return p.cmd.Process.Pid }

// stop asks the server to stop (SIGTERM) and waits for it; after 30 s it
// is killed, and that is reported.
func (p *serverProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("nats-server (pid %d) did not stop within 30 s of SIGTERM and was killed; its log: %s", p.pid(), p.logPath)
	}
}
