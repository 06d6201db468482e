"""The instruction definitions (``InstrSpec``), one module per family: ``control`` (END, WAIT,
SIGNAL), ``dma`` (DMA_LOAD, DMA_STORE), ``matrix`` (CONV, MATMUL, DWCONV), ``vector``
(REQUANT, ELTWISE, LUT, LUT_LOAD, UNARY) and ``data`` (POOL, REDUCE, COPY). Each module's
``SPECS`` tuple lists its definitions; ``tessel.isa.table`` collects them in opcode order.
"""
