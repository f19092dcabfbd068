// Package interop tests mcpsync against MCP servers that were not written here: TypeScript-SDK servers from npm and an official Go SDK server over stdio, and an mcp-go server over streamable HTTP.
package interop
