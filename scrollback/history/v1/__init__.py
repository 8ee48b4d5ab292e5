"""Generated protobuf package."""
