"""Images: the checks of an uploaded image, the store that keeps each once by content hash, what a
model reads of a stored one, and the signed URLs that show it."""
