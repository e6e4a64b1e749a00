// Command kretry is the Kafka retry-topic and dead-letter sidecar.
//
//	kretry run      -c config.yaml   run the sidecar until SIGTERM
//	kretry demo     [--records N] [--json]
//	kretry broker   [--listen 127.0.0.1:9092] [--data-dir .kretry/data]
//	kretry validate -c config.yaml
//	kretry version
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
