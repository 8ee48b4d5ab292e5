"""Full-text search over the transcripts (CONTRACT section 13): text, query, index, indexer."""
