"""agentloop"""
