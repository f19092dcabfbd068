package mcpsynctest_test

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func readText(ctx context.Context, c *client.Client, uri string) string {
	res, err := c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: uri}})
	if err != nil {
		return err.Error()
	}
	return res.Contents[0].(mcp.TextResourceContents).Text
}

// A read sent first returns last, with older content.
func Example() {
	srv := mcpsynctest.NewServer(nil)
	srv.Set("file:///a", "text/plain", "v1")

	tr := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
	c := client.NewClient(tr)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		panic(err)
	}

	hold := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
	readA := make(chan string)
	go func() { readA <- readText(ctx, c, "file:///a") }()
	<-hold.Arrived()
	srv.Set("file:///a", "text/plain", "v2")
	fmt.Println("read B:", readText(ctx, c, "file:///a"))
	hold.Release()
	fmt.Println("read A:", <-readA)
	// Output:
	// read B: v2
	// read A: v1
}

// A resource deleted between two list pages is missing from the walk.
func ExampleServer_OnPage() {
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{PageSize: 2})
	for _, name := range []string{"a", "b", "c", "d"} {
		srv.Set("file:///"+name, "text/plain", name)
	}
	srv.OnPage(func(kind string, page int) {
		if page == 1 {
			srv.Delete("file:///c")
		}
	})

	c, err := client.NewInProcessClient(srv.MCPServer())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		panic(err)
	}
	res, err := c.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Resources {
		fmt.Println(r.URI)
	}
	// Output:
	// file:///a
	// file:///b
	// file:///d
}

// A Client of package mcpsync connected to the server in process.
func ExampleServer_Dialer() {
	srv := mcpsynctest.NewServer(nil)
	srv.Set("file:///a", "text/plain", "v1")

	ctx := context.Background()
	c, err := mcpsync.Connect(ctx, srv.Dialer(), &mcpsync.ClientOptions{Subject: "user:alice"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Subscribe(ctx, "file:///a"); err != nil {
		panic(err)
	}
	entry, err := c.Lookup("file:///a")
	if err != nil {
		panic(err)
	}
	fmt.Println(entry.Contents[0].Text)
	// Output: v1
}
