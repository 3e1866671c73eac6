package main

import (
	"context"
	"fmt"
)

func cmdApprove(ctx context.Context, e *env, args []string) int {
	fmt.Fprintln(e.stderr, "console: not built yet")
	return 1
}
func cmdDeny(ctx context.Context, e *env, args []string) int {
	fmt.Fprintln(e.stderr, "console: not built yet")
	return 1
}
