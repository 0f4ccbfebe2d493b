"""File I/O shared by training, decoding and export: atomic writes, digests, checkpoint reading."""
