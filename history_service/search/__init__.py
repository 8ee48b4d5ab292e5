"""Full-text search over the transcripts (docs/contract.md §13): text, query, index, indexer."""
