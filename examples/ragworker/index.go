package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/mcpsync/mcpsync/ledger"
)

// indexName is the index every chunk goes into, as RecordDerived names it.
const indexName = "vectors"

// index is the worker's search index: a file here, a vector database in
// real life. Beside the chunks it keeps the last outbox entry it applied,
// written in the same step (one transaction in a real store): comparing an
// entry with it is what makes a redelivered entry harmless.
type index struct {
	path    string
	Applied uint64           `json:"applied"`
	Chunks  map[string]chunk `json:"chunks"` // by artifact id
	// Deleted says why the chunks of a URI went: the index's audit trail.
	Deleted map[string]deletion `json:"deleted"`
}

// chunk is one index entry and the version it was derived from.
type chunk struct {
	URI     string `json:"uri"`
	Text    string `json:"text"`
	Vector  string `json:"vector"`
	Subject string `json:"subject"`
	Ordinal uint64 `json:"ordinal"`
	Digest  string `json:"digest"`
}

// deletion is the outbox entry that deleted a URI's chunks.
type deletion struct {
	Seq      uint64                    `json:"seq"`
	Reason   ledger.InvalidationReason `json:"reason"`
	Subject  string                    `json:"subject"`
	Evidence ledger.EvidenceKind       `json:"evidence,omitempty"`
}

// openIndex reads the index at path; a missing file is an empty index.
func openIndex(path string) (*index, error) {
	idx := &index{path: path, Chunks: map[string]chunk{}, Deleted: map[string]deletion{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return idx, nil
}

// save replaces the file whole, so a process killed while saving leaves
// the old index or the new one.
func (idx *index) save() error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	tmp := idx.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, idx.path)
}

// drop deletes the chunks of uri and returns how many there were.
func (idx *index) drop(uri string) int {
	n := 0
	for id, c := range idx.Chunks {
		if c.URI == uri {
			delete(idx.Chunks, id)
			n++
		}
	}
	return n
}

// artifactID names chunk i of uri, in the index and in the ledger.
func artifactID(uri string, i int) string { return fmt.Sprintf("%s#%d", uri, i) }

// split cuts a document into chunks: its non-empty lines.
func split(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// embed is the toy model: an "embedding" is a hash prefix of the chunk.
func embed(text string) string {
	sum := sha256.Sum256([]byte(strings.ToLower(text)))
	return fmt.Sprintf("vec:%x", sum[:4])
}

func short(digest string) string {
	if len(digest) < len("sha256:")+8 {
		return digest
	}
	return digest[:len("sha256:")+8]
}
