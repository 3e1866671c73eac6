package examples

// MCPDemoSection is the mcp section `console demo` adds to the example
// tools file: the example MCP server of examples/mcpdemo, which the demo
// serves in its own process, at /mcp/demo. The tools file's overrides
// show the two kinds of target: create_order's is the customer it is for.
const MCPDemoSection = `
# The example MCP server (examples/mcpdemo). console demo runs it in its own
# process; console serve would start this command and speak to it over stdio.
mcp:
  demo:
    command: [mcp-demo]
    tools:
      create_order: {target: /customer/id}
      add: {grant_ttl: 120s}
`
