"""Images: Pillow decodes and checks them and imagehash fingerprints them
(:mod:`~dynaval.adapters.images.pillow_images`); a folder keeps them by content hash
(:mod:`~dynaval.adapters.images.image_files`)."""
