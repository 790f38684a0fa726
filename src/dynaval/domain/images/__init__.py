"""Images, for the task types whose examples are one image: what a body sends, what is stored (once,
by content hash), what a model reads, and when two images are near-copies."""
