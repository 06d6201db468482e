"""tessel.runtime"""
