"""The pooled memory's control plane: allocators over every accelerator's pages that write
the segment tables, the training-job trace they are measured on, and its fragmentation
figures (section 10.14).
"""
