package mcpsync

// SubscriptionState is a state of one subscription generation of a URI.
type SubscriptionState string
