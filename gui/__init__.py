"""cuetrain: gui package."""
