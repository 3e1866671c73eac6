package outboxtest

import "testing"

func TestMemory(t *testing.T) { Run(t, MemoryHarness) }
