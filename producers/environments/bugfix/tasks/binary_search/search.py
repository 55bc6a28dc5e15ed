def find(items: list[int], target: int) -> int:
    """The index of `target` in the sorted `items`, or -1."""
    low, high = 0, len(items) - 1
    while low < high:
        mid = (low + high) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            low = mid + 1
        else:
            high = mid - 1
    return -1
