"""tessel.codegen"""
