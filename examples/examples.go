// Package examples ships the example tools file inside the binary, so
// `console demo` runs from anywhere.
package examples

import _ "embed"

// ToolsYAML is examples/tools.yaml.
//
//go:embed tools.yaml
var ToolsYAML []byte
