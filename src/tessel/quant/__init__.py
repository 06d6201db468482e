"""tessel.quant"""
