"""Data sets: which data a run reads and the checks that refuse bad ones, image checks, IDX -> LMDB/folders."""
