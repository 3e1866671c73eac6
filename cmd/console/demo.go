package main

import (
	"context"
	"fmt"
)

func cmdDemo(ctx context.Context, e *env, args []string) int {
	fmt.Fprintln(e.stderr, "console: not built yet")
	return 1
}
