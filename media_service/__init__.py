"""The Scrollback media service: transcript images and the content-addressed blob store."""
