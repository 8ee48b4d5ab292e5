"""The Scrollback history service: transcript windows, acceptance records and live watches over gRPC."""
