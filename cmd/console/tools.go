package main

import (
	"context"
	"fmt"
)

func cmdValidate(ctx context.Context, e *env, args []string) int {
	fmt.Fprintln(e.stderr, "console: not built yet")
	return 1
}
func cmdTools(ctx context.Context, e *env, args []string) int {
	fmt.Fprintln(e.stderr, "console: not built yet")
	return 1
}
