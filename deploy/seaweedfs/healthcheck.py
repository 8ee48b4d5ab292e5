#!/usr/bin/env python
"""Exit 0 when SeaweedFS's S3 gateway answers and the bucket named in argv[1] exists."""

import sys
import urllib.parse
import urllib.request

# The S3 gateway's own health endpoint; then the filer's view of the bucket, which
# needs no signed request (404 until `weed mini -bucket` has created it).
S3_HEALTH = "http://127.0.0.1:8333/healthz"
FILER_BUCKET = "http://127.0.0.1:8888/buckets/{}/"


def main(bucket: str) -> int:
    try:
        for url in (S3_HEALTH, FILER_BUCKET.format(urllib.parse.quote(bucket))):
            request = urllib.request.Request(url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=4) as response:
                response.read()
    except OSError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
