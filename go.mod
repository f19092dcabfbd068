module github.com/mcpsync/mcpsync

go 1.26
