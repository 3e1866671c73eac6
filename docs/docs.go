// Package docs embeds the published API description so the server can serve
// it at /api/v1/openapi.yaml.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
