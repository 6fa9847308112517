"""cuetrain: trainer package."""
