"""tessel.schedule"""
