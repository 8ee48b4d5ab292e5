#!/bin/sh
# Copy every entry of /transcripts (the host's projects, mounted read-only) to
# s3://$SCROLLBACK_S3_BUCKET/$SCROLLBACK_S3_PREFIX/ through SeaweedFS's filer
# (a bucket is the filer folder /buckets/NAME), keeping the relative paths:
# /transcripts/proj/s.jsonl becomes PREFIX/proj/s.jsonl. A file already there
# with the same size is skipped, so a second start copies only what changed size.
set -eu
filer="${SEAWEEDFS_FILER:-seaweedfs:8888}"
target="http://$filer/buckets/$SCROLLBACK_S3_BUCKET/${SCROLLBACK_S3_PREFIX:+$SCROLLBACK_S3_PREFIX/}"
cd /transcripts
set -- *
if [ ! -e "$1" ]; then
    echo "upload-transcripts: /transcripts is empty, nothing to copy"
    exit 0
fi
# Unreadable files would be skipped without a word: refuse them up front.
unreadable="$(find . ! -readable -print -quit)"
if [ -n "$unreadable" ]; then
    echo "upload-transcripts: cannot read $unreadable (set SCROLLBACK_USER to its owner)" >&2
    exit 1
fi
weed filer.copy -check.size "$@" "$target"
echo "upload-transcripts: $(find . -type f | wc -l) files in $target (those of a new size copied)"
