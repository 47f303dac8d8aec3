"""Who holds which GPU: device inventory, allocation policies and the allocator.

Nothing here imports Jupyter, so the same code serves the embedded extension and the
standalone shared service.
"""
