"""cuetrain: cue_plugin package."""
