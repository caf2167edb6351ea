"""Generated gRPC stubs of the kubelet APIs carve speaks (do not edit; `make protos` regenerates them).

dra_v1 / dra_v1beta1: kubelet DRA plugin service; pluginregistration: kubelet plugin watcher registration;
deviceplugin_v1beta1: device plugin API of the legacy shim; dra_health_v1 / dra_health_v1alpha1: device
health stream (one implementation serves both, driver/plugin/health/service.py).
Sources: api/proto/*.proto. Generator: api/grpc/generate.py.
"""
